"""Every command and sub-command of the CLI, walked from the typer app (a new one is covered
the moment it is registered), turns every bad input into one `error: ... [reason]` line and
exit 2, never a traceback:

- a missing path and a malformed file of each kind (JSONL, JSON, Parquet, TOML, and folders
  holding a malformed config, stage, capture, drafter, prepare or dataset) for each path the
  command reads (its schema's `input_keys`), the rest of its config valid;
- an unknown value for each choice option;
- a malformed, missing or folder `--config`, and an unknown flag.

Each command's valid config goes through `--config` (so positional arguments are config keys
too); a bad value goes through its flag where it has one. The valid inputs are small and made
without training (the drafter is written untrained, the capture holds two samples).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import typer.main
from typer.testing import CliRunner

from eyas.cli import app
from eyas.cli_schema import Arg, CommandSchema, choices_of, field_of
from eyas.config import set_dotted

runner = CliRunner()


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if getattr(cmd, "commands", None):
            out += _commands(cmd, (*path, name))
        else:
            out.append(((*path, name), cmd))
    return out


COMMANDS = dict(_commands(typer.main.get_command(app)))
NAMES = [" ".join(p) for p in COMMANDS]


def _schema(path: tuple[str, ...]) -> CommandSchema:
    return COMMANDS[path].callback.schema


# -- the valid world --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory, toy_tiny) -> dict[str, Path]:
    """Valid inputs of every kind the commands read, on the tiny toy target."""
    from eyas.capture.config import CaptureConfig
    from eyas.capture.run import run_capture
    from eyas.export.drafter import export_drafter
    from eyas.render import Renderer
    from eyas.render.run import render_file
    from eyas.sources import convert_rows
    from eyas.toy.datasets import FAMILIES, family_rows
    from eyas.toy.samples import reference_sample
    from eyas.train.loop import Trainer
    from train_helpers import toy_train_config

    root = tmp_path_factory.mktemp("valid")
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    source = root / "glaive.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in family_rows(glaive, 3, seed=5)))
    convs = [
        c
        for c in convert_rows(family_rows(glaive, 3, seed=5), "glaive", "b1")
        if hasattr(c, "messages")
    ]
    conversations = root / "conversations.jsonl"
    conversations.write_text("".join(json.dumps(c.to_dict()) + "\n" for c in convs))
    renderer = Renderer(toy_tiny)
    rendered = root / "rendered.jsonl"
    render_file(renderer, conversations, rendered)
    samples = root / "samples.jsonl"
    rows = []
    for conv in convs:
        s = reference_sample(renderer, conv)
        s.backend, s.sampling = "local", {"max_new_tokens": 64}
        rows.append(json.dumps(s.to_dict()))
    samples.write_text("\n".join(rows) + "\n")
    quarantine = root / "quarantine.jsonl"
    quarantine.write_text("")
    capture = root / "capture"
    run_capture(
        CaptureConfig(target=toy_tiny, data=samples, out=capture, limit=2, dtype="float32"),
        log=lambda s: None,
    )
    # an untrained drafter, written by the trainer itself (setup, no step, finish)
    trainer = Trainer(
        toy_train_config(toy_tiny, root / "train", data=samples, steps=1), log=lambda s: None
    )
    trainer.setup()
    drafter = trainer.finish()
    trainer.cleanup()
    export = export_drafter(drafter, "vllm", root / "export")
    return {
        "target": toy_tiny,
        "source": source,
        "conversations": conversations,
        "rendered": rendered,
        "samples": samples,
        "sample_id": json.loads(rows[0])["id"],
        "quarantine": quarantine,
        "capture": capture,
        "drafter": drafter,
        "export": export,
        "root": root,
    }


def _baseline(path: tuple[str, ...], w: dict, out: Path) -> dict[str, Any]:
    """A valid config for each command: run as is, it would work (it is only ever run with one
    bad value). A new command needs an entry here."""
    target, samples = str(w["target"]), str(w["samples"])
    model = {"dir": target}
    return {
        ("convert",): {"input": str(w["source"]), "output": str(out / "c.jsonl")},
        ("render",): {
            "input": str(w["conversations"]),
            "output": str(out / "r.jsonl"),
            "model": model,
        },
        ("prepare",): {
            "model": model,
            "run": {"dir": str(out / "runs")},
            "datasets": [{"name": "b1", "path": str(w["source"]), "format": "glaive"}],
        },
        ("generate",): {
            "model": model,
            "generate": {
                "input": str(w["rendered"]),
                "out": str(out / "g"),
                "max_new_tokens": 4,
                "progress": False,
            },
        },
        ("audit",): {"input": samples, "model": target, "quarantine": str(out / "q.jsonl")},
        ("show",): {"data": samples, "id": w["sample_id"], "model": target},
        ("status",): {"path": str(w["capture"])},
        ("capture",): {
            "target": target,
            "data": samples,
            "out": str(out / "cap"),
            "quarantine": str(w["quarantine"]),
            "limit": 1,
        },
        ("train",): {
            "target": target,
            "data": samples,
            "out": str(out / "t"),
            "quarantine": str(w["quarantine"]),
            "steps": 1,
            "ttt": 2,
            "draft_vocab": 400,
            "max_len": 1024,
            "batch_tokens": 3000,
        },
        ("eval",): {
            "target": target,
            "drafter": str(w["drafter"]),
            "input": str(w["rendered"]),
            "limit": 1,
            "max_new_tokens": 4,
        },
        ("quickstart",): {"out": str(out / "qs"), "rows": 2},
        ("toy", "build"): {"preset": "tiny", "out": str(out / "toy")},
        ("toy", "datasets"): {"out": str(out / "ds"), "rows": 2},
        ("export", "drafter"): {
            "checkpoint": str(w["drafter"]),
            "format": "vllm",
            "out": str(out / "e"),
        },
        ("export", "check"): {"path": str(w["export"]), "target": target},
        ("bench", "fetch"): {},
        ("bench", "list"): {},
        ("export", "samples"): {
            "input": samples,
            "format": "specforge",
            "out": str(out / "s.jsonl"),
            "quarantine": str(w["quarantine"]),
        },
    }.get(path)


# -- the bad inputs ---------------------------------------------------------------------------


def _garbage(path: Path, text: bytes = b"\x00\x01 not this format \xff") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


@pytest.fixture(scope="module")
def bad(tmp_path_factory, world) -> dict[str, Path]:
    """One missing path and one malformed input of each kind, each named uniquely so the
    error line can be checked for naming it."""
    root = tmp_path_factory.mktemp("bad")
    target = world["target"]
    out = {"missing": root / "missing-path"}
    # line 1 is a well-formed sample; line 2 is cut short
    out["jsonl"] = root / "bad-lines.jsonl"
    out["jsonl"].write_text(
        '{"id": "x1", "prompt_ids": [1, 2], "output_ids": [3], "finish_reason": "stop"}\n'
        '{"id": "x2", "prompt_ids": [1\n'
    )
    out["json"] = root / "bad-doc.json"
    out["json"].write_text('{"id": "x1",\n "prompt_ids": [1,,]}\n')
    out["parquet"] = _garbage(root / "bad-table.parquet", b"PAR1 not a parquet file PAR1")
    out["toml"] = root / "bad-config.toml"
    out["toml"].write_text('[model\ndir = "x"\n')
    out["model_dir"] = root / "bad-model-dir"
    _garbage(out["model_dir"] / "config.json", b'{"model_type": "llama",\n "hidden_size": }')
    out["tokenizer_dir"] = root / "bad-tokenizer-dir"
    out["tokenizer_dir"].mkdir()
    for name in ("config.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(target / name, out["tokenizer_dir"] / name)
    _garbage(out["tokenizer_dir"] / "tokenizer.json", b'{"version": "1.0", "model": ')
    out["weights_dir"] = root / "bad-weights-dir"
    shutil.copytree(target, out["weights_dir"])
    _garbage(out["weights_dir"] / "model.safetensors")
    out["stage_dir"] = root / "bad-stage-dir"
    _garbage(out["stage_dir"] / "part-00000.parquet", b"PAR1 torn shard PAR1")
    out["manifest_dir"] = root / "bad-manifest-dir"
    shutil.copytree(world["capture"], out["manifest_dir"])
    _garbage(out["manifest_dir"] / "manifest.json", b'{"stage": "capture",')
    out["capture_dir"] = root / "bad-capture-dir"
    shutil.copytree(world["capture"], out["capture_dir"])
    for shard in out["capture_dir"].glob("part-*.safetensors"):
        _garbage(shard)
    out["drafter_dir"] = root / "bad-drafter-dir"
    shutil.copytree(world["drafter"], out["drafter_dir"])
    _garbage(out["drafter_dir"] / "drafter_config.json", b'{"hidden_size": 96,')
    out["drafter_weights_dir"] = root / "bad-drafter-weights-dir"
    shutil.copytree(world["export"], out["drafter_weights_dir"])
    _garbage(out["drafter_weights_dir"] / "model.safetensors")
    out["prepare_dir"] = root / "bad-prepare-dir"
    (out["prepare_dir"] / "rendered").mkdir(parents=True)
    shutil.copy(out["jsonl"], out["prepare_dir"] / "rendered" / "b1.jsonl")
    out["dataset_dir"] = root / "bad-dataset-dir"
    _garbage(out["dataset_dir"] / "state.json", b'{"_data_files": [')
    return out


# Paths that are not data files: only their absence is a user input worth walking here.
_ONLY_MISSING = {"python"}
# What a key needs beside it to be an input at all: an engine's python is an option of the
# engines whose servers eyas starts
_CONTEXT = {"engine.python": {"backend": "vllm"}}
# What an input does not read, so a malformed one there is no error: these commands use only
# the tokenizer of their model directory, never its weights; an export never reads a tokenizer.
_UNREAD = {
    (("render",), "model.dir"): {"weights_dir"},
    (("prepare",), "model.dir"): {"weights_dir"},
    (("audit",), "model"): {"weights_dir"},
    (("show",), "model"): {"weights_dir"},
    # an export's target: its config.json and embedding (a config-only copy skips the check)
    (("export", "drafter"), "target"): {"tokenizer_dir"},
    (("export", "check"), "target"): {"tokenizer_dir"},
}


def _kinds(path: tuple[str, ...], key: str, bad: dict[str, Path]) -> list[str]:
    if key.split(".")[-1] in _ONLY_MISSING:
        return ["missing"]
    return [k for k in bad if k not in _UNREAD.get((path, key), set())]


# -- running ----------------------------------------------------------------------------------

_REASON = re.compile(r"\[[a-z][a-z0-9_]*\]$")


def _run(path: tuple[str, ...], config: dict, args: list[str], tmp: Path) -> Any:
    tmp.mkdir(parents=True, exist_ok=True)
    file = tmp / "config.toml"
    file.write_text(tomli_w.dumps(config))
    return runner.invoke(app, [*path, "--config", str(file), *args])


def _problem(result: Any, needle: str) -> str | None:
    """Why `result` is not one `error:` line naming `needle` with exit 2 (None: it is)."""
    text = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return f"raised {type(result.exception).__name__}: {result.exception}"
    if "Traceback" in text:
        return "printed a traceback"
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    if result.exit_code != 2 or len(errors) != 1:
        return f"exit {result.exit_code} with {len(errors)} error lines: {text[-600:]!r}"
    if text.strip().splitlines()[-1] != errors[0] or not _REASON.search(errors[0]):
        return f"the error line is not last or has no [reason]: {text[-600:]!r}"
    if needle not in errors[0]:
        return f"the error does not name {needle!r}: {errors[0]}"
    return None


def _without(config: dict, key: str) -> dict:
    """`config` without `key` (a copy)."""
    config = json.loads(json.dumps(config))
    node = config
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.get(part, {})
    if isinstance(node, dict):
        node.pop(parts[-1], None)
    return config


def _with(config: dict, key: str, value: str) -> dict:
    """`config` with `key` set to `value` (`*`: in every item of the list)."""
    config = json.loads(json.dumps(config))
    if "*" in key:
        head, rest = key.split(".*.")
        for item in config.get(head, []):
            set_dotted(item, rest, value)
    else:
        set_dotted(config, key, value)
    return config


def _flag(schema: CommandSchema, key: str) -> str | None:
    for p in schema.params:
        if p.key == key and not isinstance(p, Arg):
            return p.option
    return None


def test_every_command_is_generated_from_its_schema(tmp_path):
    assert {"convert", "render", "prepare", "generate", "audit", "train", "eval"} <= {
        p[0] for p in COMMANDS
    }
    assert ("export", "samples") in COMMANDS and ("toy", "build") in COMMANDS
    for path, cmd in COMMANDS.items():
        schema = getattr(cmd.callback, "schema", None)
        assert isinstance(schema, CommandSchema), f"{path}: not built by schema_flags"
        assert _baseline(path, {k: tmp_path for k in _WORLD_KEYS}, tmp_path) is not None, (
            f"{' '.join(path)}: add a valid config to _baseline in this test"
        )
        for key in schema.input_keys:
            field_of(schema.model, key)  # every input key names a field


_WORLD_KEYS = (
    "target",
    "source",
    "conversations",
    "rendered",
    "samples",
    "sample_id",
    "quarantine",
    "capture",
    "drafter",
    "export",
)


@pytest.mark.parametrize("path", list(COMMANDS), ids=NAMES)
def test_bad_inputs_are_one_error_line(path, world, bad, tmp_path):
    schema = _schema(path)
    config = _baseline(path, world, tmp_path / "out")
    # the baseline itself is valid and its inputs exist (so each bad value is what fails)
    file = tmp_path / "baseline.toml"
    file.write_text(tomli_w.dumps(config))
    schema.load(file, {}, None)
    for key in schema.input_keys:
        if "*" in key:
            assert config.get(key.split(".")[0]), f"the baseline gives no {key} to replace"

    problems = []

    def check(label: str, result: Any, needle: str) -> None:
        if (why := _problem(result, needle)) is not None:
            problems.append(f"{' '.join(path)} {label}: {why}")

    for k, key in enumerate(schema.input_keys):
        flag = _flag(schema, key)
        for kind in _kinds(path, key, bad):
            value = str(bad[kind])
            tmp = tmp_path / f"{k}-{kind}"
            config = _baseline(path, world, tmp / "out")  # outputs of its own
            config = {**config, **_CONTEXT.get(key, {})}
            if flag is not None:
                result = _run(path, _without(config, key), [flag, value], tmp)
            else:
                result = _run(path, _with(config, key, value), [], tmp)
            check(f"{key}={kind}", result, bad[kind].name)

    for p in schema.params:
        if isinstance(p, Arg) or choices_of(field_of(schema.model, p.key)) is None:
            continue
        result = _run(path, _without(config, p.key), [p.option, "bogus-choice"], tmp_path / "c")
        check(f"{p.option} bogus-choice", result, "bogus-choice")

    for kind in ("toml", "missing", "stage_dir"):
        result = runner.invoke(app, [*path, "--config", str(bad[kind])])
        check(f"--config {kind}", result, bad[kind].name)
    result = _run(path, config, ["--no-such-flag"], tmp_path / "f")
    check("--no-such-flag", result, "--no-such-flag")
    result = _run(path, config, ["--set", "no_such_key=1"], tmp_path / "s")
    check("--set no_such_key=1", result, "no_such_key")

    assert not problems, "\n".join(problems)


def test_malformed_lines_are_named_by_file_and_line(bad):
    """The line number is the file's, not the decoder's position inside the line."""
    result = runner.invoke(app, ["audit", str(bad["jsonl"])])
    assert _problem(result, f"{bad['jsonl'].name}:2: not valid JSON") is None, result.output
    result = runner.invoke(app, ["train", "--config", str(bad["toml"])])
    assert _problem(result, f"{bad['toml'].name}:1: not valid TOML") is None, result.output
