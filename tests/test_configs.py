"""Every shipped config parses; the schema is strict."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from eyas.generate.config import PipelineConfig, load_config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_config_loads(path):
    cfg = load_config(path)
    assert cfg.datasets and cfg.model.dir.is_absolute()
    assert all(d.path.is_absolute() for d in cfg.datasets)


def test_unknown_keys_and_bad_overrides_are_rejected(tmp_path):
    base = '[model]\ndir = "m"\n[[datasets]]\nname = "a"\npath = "a.jsonl"\n'
    (tmp_path / "ok.toml").write_text(base)
    cfg = load_config(tmp_path / "ok.toml", ["backend.concurrency=7", "sampling.temperature=0.5"])
    assert cfg.backend.concurrency == 7 and cfg.sampling.temperature == 0.5
    assert cfg.model.dir == tmp_path / "m"
    (tmp_path / "bad.toml").write_text(base + "[backend]\nconcurency = 3\n")
    with pytest.raises(ValidationError, match="concurency"):
        load_config(tmp_path / "bad.toml")
    with pytest.raises(ValidationError):
        load_config(tmp_path / "ok.toml", ["backend.concurrency=0"])
    with pytest.raises(ValidationError, match="needs at least one url"):
        load_config(tmp_path / "ok.toml", ["backend.kind=sglang"])


def _command_models():
    """The config model of every command (walked from the typer app)."""
    import typer.main

    from eyas.cli import app

    def walk(group):
        for cmd in getattr(group, "commands", {}).values():
            yield from walk(cmd) if getattr(cmd, "commands", None) else [cmd.callback.schema]

    return {schema.model for schema in walk(typer.main.get_command(app))}


def _keys(model, prefix=""):
    """Every dotted key of a model, with its annotation (`*`: a list's items)."""
    import types
    import typing

    from pydantic import BaseModel

    from eyas.backends.engine import EngineOptions
    from eyas.backends.registry import option_models

    for name, field in model.model_fields.items():
        inner = field.annotation
        if typing.get_origin(inner) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(inner) if a is not type(None)]
            inner = args[0] if len(args) == 1 else inner
        if typing.get_origin(inner) is list and isinstance(typing.get_args(inner)[0], type):
            item = typing.get_args(inner)[0]
            if issubclass(item, BaseModel):
                yield from _keys(item, f"{prefix}{name}.*.")
                continue
        if isinstance(inner, type) and issubclass(inner, EngineOptions):
            # an engine's options: the keys of every registered engine's model
            for options in option_models():
                yield from _keys(options, f"{prefix}{name}.")
            continue
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _keys(inner, f"{prefix}{name}.")
            continue
        yield f"{prefix}{name}", inner


def test_every_path_field_is_rebased_and_every_input_is_a_path():
    """A path in a config file means the same from any directory; the paths a command
    checks before it runs are path fields."""
    for model in _command_models():
        paths = {key for key, kind in _keys(model) if kind is Path}
        assert paths <= set(model.path_keys), f"{model.__name__}: {paths - set(model.path_keys)}"
        assert set(model.input_keys) <= paths, model.__name__


def test_choices_come_from_their_registries():
    from typing import get_args

    from eyas.cli_schema import choices_of, field_of
    from eyas.config import ToyPreset
    from eyas.export.config import ExportFormat, SampleFormat
    from eyas.export.drafter import EXPORT_FORMATS
    from eyas.export.samples import SAMPLE_FORMATS
    from eyas.formats import MODEL_FORMATS
    from eyas.generate.config import DatasetConfig
    from eyas.sources import FORMATS
    from eyas.toy.train import PRESETS

    assert choices_of(field_of(DatasetConfig, "format")) == (*FORMATS, "auto")
    assert set(choices_of(field_of(PipelineConfig, "model.profile"))) == set(MODEL_FORMATS)
    assert get_args(ToyPreset) == tuple(PRESETS)
    assert get_args(ExportFormat) == EXPORT_FORMATS and get_args(SampleFormat) == SAMPLE_FORMATS
    with pytest.raises(ValidationError, match="unknown source format 'gla'"):
        DatasetConfig(name="a", path="a.jsonl", format="gla")


def test_audit_defaults_live_in_the_schema():
    from eyas.audit import AuditOptions
    from eyas.audit.config import AuditConfig

    cfg = AuditConfig(input="x")
    assert cfg.options() == AuditOptions()
    assert AuditConfig(input="x", decode_sample="all").options().decode_limit is None
    assert AuditConfig(input="x", decode_sample="12").options().decode_limit == 12
    with pytest.raises(ValidationError, match="count or 'all'"):
        AuditConfig(input="x", decode_sample="many")


def test_quickstart_toml_loads_back_into_the_config_it_ran(tmp_path, monkeypatch):
    """Every field is written (not only the ones a hand-written template lists), and paths
    are absolute: the file means the same config from any directory."""
    from eyas.config import SamplingConfig, build_config
    from eyas.generate.config import BackendConfig, DatasetConfig
    from eyas.quickstart import _config, _write_toml
    from eyas.toy.datasets import FAMILIES

    monkeypatch.chdir(tmp_path)
    sources = {f.name: Path("sources") / f"{f.name}.jsonl" for f in FAMILIES}
    cfg = _config(Path("runs/qs"), tmp_path / "model", sources, 256)
    cfg.datasets[0] = DatasetConfig(
        name="b1", path=sources["b1_glaive"], limit=5, sampling=SamplingConfig(top_p=0.5)
    )
    cfg.backend = BackendConfig(kind="local", concurrency=3, timeout_s=7.5)
    cfg.generate.multi_turn = "all"
    cfg.sampling.seed = 11
    path = tmp_path / "runs" / "qs" / "quickstart.toml"
    _write_toml(cfg, path)
    text = path.read_text()
    assert text.startswith("# written by `eyas quickstart`") and "seed = 11" in text

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = build_config(PipelineConfig, path)
    expected = cfg.model_copy(deep=True)
    expected.run.dir = tmp_path / "runs" / "qs"
    for d in expected.datasets:
        d.path = tmp_path / d.path
    assert loaded == expected
    assert loaded.datasets[0].sampling.top_p == 0.5 and loaded.backend.timeout_s == 7.5


def test_a_methods_options_live_in_its_package_nested_under_its_name_each_a_train_flag(tmp_path):
    """A drafter method's own options are declared in its package (`options` module), not in
    `config.py`; `TrainConfig` holds each method's model under the method's name, and `eyas
    train` has a flag per option (`--dflash.block-size`), so a new option touches the method's
    package only, and two methods may own options of one name."""
    import typer

    from eyas.cli import app
    from eyas.drafter.options import MethodOptions, method_option_keys
    from eyas.train.config import TrainConfig

    modules = {f.annotation.__module__ for f in MethodOptions.model_fields.values()}
    assert modules == {
        "eyas.drafter.eagle3.options",
        "eyas.drafter.dflash.options",
        "eyas.drafter.dflash2.options",
        "eyas.drafter.peagle.options",
    }
    declared_here = set(TrainConfig.__annotations__)
    assert not declared_here & set(MethodOptions.model_fields)
    keys = method_option_keys()
    assert "dflash.max_anchors" in keys and "peagle.max_anchors" in keys  # one name, two owners
    command = typer.main.get_command(app).commands["train"]
    flags = {opt for p in command.params for opt in p.opts}
    for key in keys:
        assert "--" + key.replace("_", "-") in flags, key
    cfg = TrainConfig(
        target=tmp_path, out=tmp_path, data=tmp_path, dflash={"max_anchors": 3},
        peagle={"max_anchors": 5},
    )  # fmt: skip
    assert (cfg.dflash.max_anchors, cfg.peagle.max_anchors) == (3, 5)
    with pytest.raises(ValidationError, match=r"dflash\.blok_size"):  # a nested typo is refused
        TrainConfig(target=tmp_path, out=tmp_path, data=tmp_path, dflash={"blok_size": 3})


def test_the_config_asks_the_method_for_its_draft_layer_count(tmp_path):
    """`TrainConfig` holds no method rule: each method says which layer counts it builds
    (`DraftMethod.draft_layers_problem`), EAGLE-3 and P-EAGLE one, DFlash any."""
    from eyas.drafter.registry import METHODS
    from eyas.train.config import TrainConfig

    def train(method, layers):
        return TrainConfig(
            target=tmp_path, out=tmp_path, data=tmp_path, method=method, draft_layers=layers
        )

    for method in ("eagle3", "eagle3.1", "peagle"):
        assert train(method, 1).draft_layers == 1
        with pytest.raises(ValidationError, match="drafters have one decoder layer"):
            train(method, 2)
    assert train("dflash", 3).draft_layers == 3 and train("dflash2", 2).draft_layers == 2
    assert all(m.draft_layers_problem(None) is None for m in METHODS.values())
