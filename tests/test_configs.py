"""Every shipped config parses; the schema is strict."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from eyas.config import load_config

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
