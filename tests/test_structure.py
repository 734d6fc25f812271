"""Structural rules: family knowledge only in eyas.formats; shards by sha256 that hold across
processes; flags generated from the config schema, overriding their keys."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from eyas.config import GenerateConfig, PipelineConfig, TrainConfig, build_config
from eyas.errors import EyasError
from eyas.formats import MODEL_FORMATS
from eyas.jobs import shard_of

SRC = Path(__file__).resolve().parents[1] / "src" / "eyas"


def test_no_module_outside_formats_branches_on_a_family_name():
    names = "|".join(re.escape(n) for n in MODEL_FORMATS if n != "generic")
    branch = re.compile(
        rf"""(==|!=|startswith\(|in\s*\()\s*["']({names}|kimi|qwen|glm)|["']({names})["']\s*(==|!=)"""
    )
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "formats":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if branch.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


SHARD_SCRIPT = """
import sys
from eyas.jobs import shard_of
ids = [f"{k:032x}" for k in range(0, 4000, 7)] + [f"sample-{k}" for k in range(300)]
print(",".join(str(shard_of(i, 5)) for i in ids))
"""


def test_sha256_shards_cover_everything_once_in_any_process():
    ids = [f"{k:032x}" for k in range(0, 4000, 7)] + [f"sample-{k}" for k in range(300)]
    shards = [{i for i in ids if shard_of(i, 5) == s} for s in range(5)]
    assert set().union(*shards) == set(ids)  # the union is everything
    assert sum(len(s) for s in shards) == len(ids)  # and the shards are disjoint
    assert all(len(s) > len(ids) / 10 for s in shards)  # roughly even
    runs = set()
    for seed in ("0", "1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", SHARD_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        ).stdout.strip()
        runs.add(out)
    assert len(runs) == 1  # the same assignment whatever Python's hash seed
    assert runs.pop() == ",".join(str(shard_of(i, 5)) for i in ids)


def test_flags_override_the_file_and_defaults_live_in_the_schema(tmp_path):
    (tmp_path / "p.toml").write_text(
        '[model]\ndir = "m"\n[backend]\nkind = "sglang"\nurls = ["http://a:1"]\nconcurrency = 8\n'
    )
    cfg = build_config(
        PipelineConfig,
        tmp_path / "p.toml",
        {"backend.concurrency": 32, "backend.batch_size": 4, "generate.out": Path("out")},
        ["backend.timeout_s=9"],
    )
    assert cfg.backend.concurrency == 32 and cfg.backend.batch_size == 4  # flags win
    assert cfg.backend.timeout_s == 9 and cfg.model.dir == tmp_path / "m"
    assert cfg.generate_out == Path("out")  # a flag's relative path: the working directory
    assert cfg.generate.max_new_tokens == GenerateConfig.model_fields["max_new_tokens"].default
    with pytest.raises(EyasError, match="conflicts"):
        build_config(
            PipelineConfig,
            tmp_path / "p.toml",
            {"backend.concurrency": 32},
            ["backend.concurrency=16"],
        )
    with pytest.raises(Exception, match="timeout_z"):
        build_config(PipelineConfig, tmp_path / "p.toml", None, ["backend.timeout_z=9"])


def test_cli_defaults_come_from_the_schema():
    from typer.testing import CliRunner

    from eyas.cli import app

    text = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "300"}).output
    default_ttt = TrainConfig.model_fields["ttt"].default
    assert f"[ttt; default {default_ttt}]" in text
    generate = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "300"}).output
    from eyas.config import BackendConfig

    batch = BackendConfig.model_fields["batch_size"].default
    assert f"[backend.batch_size; default {batch}]" in generate and "--url" in generate
