"""Load any drafter a user can pass, of any registered method:

- the directory `eyas train --out` wrote (its final `drafter/`, or `step=N` for a checkpoint);
- eyas's own drafter directory (`drafter_config.json` + `model.safetensors`);
- an SGLang or vLLM/speculators export, including ones eyas did not write (SGLang
  `LlamaForCausalLMEagle3`, speculators `eagle3` with or without EAGLE-3.1's `fc_norm` /
  `norm_output`, z-lab's `DFlashDraftModel`, speculators `dflash`): the method whose loader
  reads the config reads it from the format's documented keys, and fills in what the layout
  leaves to the engine (the target's embedding, DFlash's head) from the target.

Fused target layers are always returned in HF `hidden_states` terms, in the engines' (layer)
order. A third-party SGLang config's ids are read by the convention they imply
(`eyas.backends.sglang.conventions.read_layer_ids`: a first id of 0 or 1 names layer outputs,
2 or more the HF index, SGLang PR #25454), and the drafter config's `extra["aux_layer_rule"]`
says which was chosen (`eyas eval` and `eyas export check` print it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from eyas.drafter.dcp import read_sharded_weights
from eyas.drafter.method import DrafterLoadError
from eyas.drafter.registry import get_method, method_reading
from eyas.errors import unreadable
from eyas.jsonl import read_json_object


def resolve_drafter_dir(path: str | Path, step: int | None = None) -> Path:
    """The directory holding the drafter's weights, from any of the accepted layouts."""
    path = Path(path)
    if not path.is_dir():
        state = "is a file, not a folder" if path.exists() else "does not exist"
        raise DrafterLoadError(f"drafter directory {path} {state}")
    if step is not None:
        ckpt = path / "checkpoints" / f"step-{step:07d}"
        if not ckpt.is_dir():
            have = sorted(p.name for p in (path / "checkpoints").glob("step-*"))
            raise DrafterLoadError(f"no checkpoint for step {step} in {path} (have {have})")
        return ckpt
    if (path / "drafter_config.json").exists() or (path / "config.json").exists():
        return path
    if (path / "drafter" / "drafter_config.json").exists():
        return path / "drafter"
    if (path / "checkpoints").is_dir():
        raise DrafterLoadError(
            f"{path} has checkpoints but no final drafter/ (training unfinished?): pass --step N"
        )
    raise DrafterLoadError(
        f"{path} is not a drafter: expected an `eyas train --out` dir, a drafter dir with "
        "drafter_config.json, or an SGLang/speculators export with config.json"
    )


def exported_aux_layers(cfg: dict[str, Any]) -> list[int] | None:
    """The HF `hidden_states` indices an exported config makes the engine feed the drafter."""
    return method_reading(cfg).exported_aux_layers(cfg)


def exported_config(cfg: dict[str, Any]) -> Any:
    """The drafter config of an exported `config.json`; aux ids in HF terms."""
    return method_reading(cfg).read_export(cfg)


def load_drafter(
    path: str | Path,
    device: str = "cpu",
    step: int | None = None,
    target_dir: str | Path | None = None,
) -> nn.Module:
    """The drafter in eval mode, float32, on `device`."""
    folder = resolve_drafter_dir(path, step)
    weights_file = folder / "model.safetensors"
    if (folder / "dcp").is_dir() and not weights_file.exists():
        # a sharded training checkpoint: consolidated here; its frozen target tensors are
        # read from the target it was trained on
        weights = read_sharded_weights(folder)
        target_dir = target_dir or read_json_object(folder / "drafter_config.json").get(
            "target_dir"
        )
    elif not weights_file.exists():
        raise DrafterLoadError(f"{folder} has no model.safetensors")
    else:
        try:
            weights = load_file(str(weights_file))
        except (SafetensorError, OSError) as exc:
            raise unreadable(weights_file, "safetensors", exc) from exc
    if (folder / "drafter_config.json").exists():
        raw = read_json_object(folder / "drafter_config.json")
        method = get_method(raw.get("method", "eagle3"))  # drafters of eyas < 0.9: EAGLE-3
        cfg = method.config_from_dict(raw)
    else:
        exported = read_json_object(folder / "config.json")
        method = method_reading(exported)
        cfg = method.read_export(exported)
    model = method.build_model(cfg)
    weights = {k: v.float() if v.is_floating_point() else v for k, v in weights.items()}
    weights = method.complete_weights(weights, cfg, folder, target_dir)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise DrafterLoadError(
            f"{folder}: tensors missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    return model.to(device).eval()


__all__ = [
    "DrafterLoadError",
    "exported_aux_layers",
    "exported_config",
    "load_drafter",
    "resolve_drafter_dir",
]
