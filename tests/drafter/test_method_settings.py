"""The training settings each `DraftMethod` reads are typed: `MethodTrainSettings` (shared) and
each method's own protocol, which `TrainConfig` satisfies, and which declare every field the
drafter code reads from `train_cfg` (read from the source, so a new read fails here until it is
declared)."""

import ast
import inspect
from pathlib import Path

from eyas.backends.vllm import conventions as vllm
from eyas.drafter.dflash.method import DFlashTrainSettings
from eyas.drafter.dflash.options import DFlashOptions
from eyas.drafter.dflash2.method import DFlash2TrainSettings
from eyas.drafter.dflash2.options import DFlash2Options
from eyas.drafter.eagle3.method import Eagle3TrainSettings
from eyas.drafter.eagle3.options import Eagle3Options
from eyas.drafter.method import MethodTrainSettings
from eyas.drafter.peagle.method import PEagleTrainSettings
from eyas.drafter.peagle.options import PEagleOptions
from eyas.train.config import TrainConfig

DRAFTER = Path(__file__).resolve().parents[2] / "src" / "eyas" / "drafter"
PROTOCOLS = {
    "eagle3": (Eagle3TrainSettings, Eagle3Options),
    "dflash": (DFlashTrainSettings, DFlashOptions),
    "dflash2": (DFlash2TrainSettings, DFlash2Options),
    "peagle": (PEagleTrainSettings, PEagleOptions),
}


def fields(protocol: type) -> set[str]:
    """The fields a protocol declares, its bases' included."""
    return {
        name
        for cls in protocol.__mro__
        if getattr(cls, "_is_protocol", False)
        for name in inspect.get_annotations(cls)
    }


def train_cfg_reads(path: Path) -> set[str]:
    """The fields the module reads from a `train_cfg` by name: `train_cfg.x` and
    `getattr(train_cfg, "x", ...)`."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "train_cfg":
            found.add(node.attr)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
            target, name = node.args[0], node.args[1]
            if getattr(target, "id", None) == "train_cfg" and isinstance(name, ast.Constant):
                found.add(name.value)
    return found


def test_train_config_has_every_field_the_methods_read(tmp_path):
    cfg = TrainConfig(target=tmp_path, out=tmp_path, data=tmp_path)
    assert isinstance(cfg, MethodTrainSettings)  # runtime_checkable: the shared fields
    for protocol, _ in PROTOCOLS.values():
        missing = [f for f in fields(protocol) if not hasattr(cfg, f)]
        assert missing == [], protocol.__name__
        assert fields(MethodTrainSettings) < fields(protocol)


def test_each_method_reads_its_options_as_one_nested_model(tmp_path):
    """A method's options sit under its name (`train_cfg.dflash.block_size`): its protocol
    declares that one field, typed by the method's own options model."""
    from eyas.drafter.options import MethodOptions

    cfg = TrainConfig(target=tmp_path, out=tmp_path, data=tmp_path)
    for section, (protocol, options) in PROTOCOLS.items():
        assert section in fields(protocol), protocol.__name__
        assert MethodOptions.model_fields[section].annotation is options
        assert isinstance(getattr(cfg, section), options)
    assert fields(DFlashTrainSettings) < fields(DFlash2TrainSettings)  # DFlash2 reads DFlash's
    assert fields(Eagle3TrainSettings) < fields(PEagleTrainSettings)  # P-EAGLE EAGLE-3's layer
    assert set(vllm.DFLASH2_KEYS) <= set(DFlash2Options.model_fields)  # read by name in a loop


def test_every_train_cfg_read_in_the_drafter_is_declared():
    undeclared = []
    for path in sorted(DRAFTER.rglob("*.py")):
        package = path.relative_to(DRAFTER).parts[0]
        protocol = PROTOCOLS.get(package, (MethodTrainSettings, None))[0]
        for name in sorted(train_cfg_reads(path) - fields(protocol)):
            undeclared.append(f"{path.relative_to(DRAFTER)}: {name} ({protocol.__name__})")
    assert undeclared == []
    # the reader sees reads (it would catch an undeclared one)
    assert {"ttt", "loss_decay", "chunk_len"} <= train_cfg_reads(DRAFTER / "eagle3" / "method.py")
    assert "dflash" in train_cfg_reads(DRAFTER / "dflash" / "method.py")
