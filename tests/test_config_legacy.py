"""The old config keys and flags (`eyas.config_legacy`): each still gives the config its new
key gives, and each one read prints exactly one `deprecated:` line (a `DeprecatedKey`
warning in Python), never a traceback."""

import json
import warnings

import pytest
from typer.testing import CliRunner

from eyas.capture.config import CaptureConfig
from eyas.cli import app
from eyas.config import build_config
from eyas.config_legacy import UNTIL, DeprecatedKey
from eyas.evaluate.config import EvalConfig
from eyas.export.config import ExportCheckConfig, ExportSamplesConfig
from eyas.generate.config import PipelineConfig
from eyas.train.config import TrainConfig

URL = "http://127.0.0.1:9"


def _read(model, file=None, flags=None, overrides=None):
    """The config and the deprecation messages its reading gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = build_config(model, file, flags, overrides)
    return cfg, [str(w.message) for w in caught if issubclass(w.category, DeprecatedKey)]


def _deprecated_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("deprecated:")]


@pytest.fixture
def paths(tmp_path, toy_tiny, toy_samples):
    py = tmp_path / "python"
    py.write_text("")
    return {"target": str(toy_tiny), "data": str(toy_samples), "out": str(tmp_path), "py": py}


def test_every_old_key_reads_as_its_new_key_with_one_deprecation(paths):
    """(model, the config with the old key, the same with its new key, the old key)."""
    t, d, o, py = paths["target"], paths["data"], paths["out"], paths["py"]
    train = {"target": t, "data": d, "out": o}
    cap = {**train, "backend": "vllm"}
    served = {"target": t, "drafter": o, "input": d, "backend": "vllm"}
    samples = {"input": d, "format": "specforge", "out": o}
    gen = {"model": {"dir": "m"}}
    backend = {"kind": "vllm", "urls": [URL]}
    cases = [
        (TrainConfig, {**train, "include_truncated": False}, {**train, "truncated": "skip"},
         "include_truncated"),
        (TrainConfig, {**train, "include_truncated": True}, {**train, "truncated": "train"},
         "include_truncated"),
        (TrainConfig, {**train, "capture_ahead": 1, "capture_urls": [URL]},
         {**train, "capture_ahead": 1, "capture_server": {"urls": [URL]}}, "capture_urls"),
        (TrainConfig, {**train, "capture_concurrency": 3},
         {**train, "capture_server": {"concurrency": 3}}, "capture_concurrency"),
        (CaptureConfig, {**cap, "server": {"urls": [URL]}, "include_truncated": False},
         {**cap, "server": {"urls": [URL]}, "truncated": "skip"}, "include_truncated"),
        (CaptureConfig, {**cap, "server": {"urls": [URL]}, "max_attempts": 2},
         {**cap, "server": {"urls": [URL], "retry": {"max_attempts": 2}}}, "max_attempts"),
        (CaptureConfig, {**cap, "vllm_python": py}, {**cap, "engine": {"python": py}},
         "vllm_python"),
        (EvalConfig, {**served, "vllm_python": py}, {**served, "engine": {"python": py}},
         "vllm_python"),
        (EvalConfig, {**served, "server": {"urls": [URL]}, "retry": {"max_attempts": 7}},
         {**served, "server": {"urls": [URL], "retry": {"max_attempts": 7}}}, "retry"),
        (PipelineConfig, {**gen, "backend": {**backend, "vllm_endpoint": "generate"}},
         {**gen, "backend": backend, "engine": {"endpoint": "generate"}},
         "backend.vllm_endpoint"),
        (ExportSamplesConfig, {**samples, "include_truncated": False},
         {**samples, "truncated": "skip"}, "include_truncated"),
        (ExportCheckConfig, {"path": o, "vllm_python": py}, {"path": o, "engine_python": py},
         "vllm_python"),
    ]  # fmt: skip
    for model, old, new, key in cases:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = model.model_validate(old)
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecatedKey)]
        assert got == model.model_validate(new), (model.__name__, key)
        assert len(messages) == 1, (model.__name__, key, messages)
        assert messages[0].startswith(f"{key} is now "), messages
        assert messages[0].endswith(f"the old key is read until {UNTIL}"), messages
    # the new keys alone: no deprecation
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecatedKey)
        for model, _, new, _ in cases:
            model.model_validate(new)


def test_include_truncated_in_an_old_toml_file(paths, tmp_path):
    """Old configs wrote every key: `include_truncated = false` was the old default (skip)."""
    toml = tmp_path / "train.toml"
    body = f'target = "{paths["target"]}"\ndata = "{paths["data"]}"\nout = "o"\n'
    toml.write_text(body + "include_truncated = false\n")
    cfg, messages = _read(TrainConfig, toml)
    assert cfg.truncated == "skip"
    assert messages == [
        f"include_truncated is now truncated (train|skip); the old key is read until {UNTIL}"
    ]
    toml.write_text(body + "include_truncated = true\n")
    assert _read(TrainConfig, toml)[0].truncated == "train"
    # the old key and the new one saying different things: which one should win?
    with pytest.raises(ValueError, match="include_truncated is the old name of truncated"):
        _read(TrainConfig, toml, None, ["truncated=skip"])


def test_include_truncated_flag_is_an_alias(tmp_path, toy_samples):
    """`--include-truncated` is `--truncated train`, `--no-include-truncated` `--truncated
    skip`: the same samples exported, and one deprecation line."""
    rows = [json.loads(line) for line in toy_samples.read_text().splitlines()]
    rows[0]["finish_reason"] = "length"  # cut at max_new_tokens (and no loop)
    data = tmp_path / "cut.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def export(*flags: str) -> tuple[list[str], str]:
        out = tmp_path / "out.jsonl"
        res = CliRunner().invoke(
            app,
            ["export", "samples", str(data), "--format", "specforge", "--out", str(out), *flags],
        )
        assert res.exit_code == 0, res.output
        return [json.loads(x)["id"] for x in out.read_text().splitlines()], res.output

    trained, quiet = export("--truncated", "train")
    skipped, _ = export("--truncated", "skip")
    assert rows[0]["id"] in trained and rows[0]["id"] not in skipped
    assert _deprecated_lines(quiet) == []
    for flag, expected in (("--include-truncated", trained), ("--no-include-truncated", skipped)):
        ids, output = export(flag)
        assert ids == expected, flag
        assert _deprecated_lines(output) == [
            "deprecated: --include-truncated is now --truncated train; the old flag is read "
            f"until {UNTIL}"
        ], output
        assert "Traceback" not in output and "FutureWarning" not in output
    res = CliRunner().invoke(
        app,
        [
            *("export", "samples", str(data), "--format", "specforge"),
            *("--out", str(tmp_path / "x.jsonl"), "--include-truncated", "--truncated", "skip"),
        ],
    )
    assert res.exit_code == 2 and "give one" in res.output, res.output


def test_an_old_key_in_a_file_is_one_line_on_the_command_line(paths, tmp_path):
    """A capture config written before the server settings had one home: each old key read
    prints one line, and the command goes on (here to its dry run)."""
    toml = tmp_path / "cap.toml"
    toml.write_text(
        f'target = "{paths["target"]}"\ndata = "{paths["data"]}"\nout = "o"\n'
        'backend = "vllm"\nurls = ["http://127.0.0.1:9"]\nmax_attempts = 6\n'
    )
    res = CliRunner().invoke(app, ["capture", "--config", str(toml), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert _deprecated_lines(res.output) == [
        f"deprecated: urls is now server.urls; the old key is read until {UNTIL}",
        f"deprecated: max_attempts is now server.retry.max_attempts; the old key is read until "
        f"{UNTIL}",
    ], res.output
    assert "Traceback" not in res.output and "FutureWarning" not in res.output


def test_vllm_python_flag_prints_one_line(paths, tmp_path):
    res = CliRunner().invoke(
        app,
        [
            *("export", "check", paths["out"], "--vllm-python", str(paths["py"])),
            *("--set", "engine_python=/elsewhere"),
        ],
    )
    assert res.exit_code == 2, res.output  # the flag and an override disagree: one error
    assert _deprecated_lines(res.output) == [
        f"deprecated: --vllm-python is now --engine-python; the old flag is read until {UNTIL}"
    ], res.output


OLD_METHOD_VALUES = {
    "draft_head": "frozen", "block_size": 4, "max_anchors": 3, "dflash_weighting": "dpace",
    "dflash_gamma": 2.0, "dpace_alpha": 0.3, "mask_token_id": 5, "conv_kernel_size": 3,
    "conv_group_size": 8, "selector_rank": 16, "selector_top_k": 4, "selector_loss_alpha": 0.5,
    "peagle_depths": 4, "peagle_down_sample_ratio": 0.5, "peagle_down_sample_ratio_min": 0.1,
    "peagle_max_anchors": 7, "peagle_mask_token_id": 9,
}  # fmt: skip


def test_every_method_options_old_flat_key_reads_as_its_nested_key(paths):
    """The method options were top-level keys until they were nested under their method's
    name: each old key (in Python, a file or `--set`) gives the nested key's config, with one
    deprecation; the old key and its new one with two values is an error."""
    from eyas.drafter.options import OLD_KEYS

    assert set(OLD_METHOD_VALUES) == set(OLD_KEYS)  # every old key is checked here
    train = {"target": paths["target"], "data": paths["data"], "out": paths["out"]}
    for old, value in OLD_METHOD_VALUES.items():
        section, key = OLD_KEYS[old].split(".")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = TrainConfig.model_validate({**train, old: value})
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecatedKey)]
        assert getattr(getattr(got, section), key) == value, old
        assert got == TrainConfig.model_validate({**train, section: {key: value}}), old
        assert messages == [f"{old} is now {section}.{key}; the old key is read until {UNTIL}"]
        other = {**train, old: value, section: {key: "x" if isinstance(value, str) else 99}}
        with pytest.raises(ValueError, match="give one"):
            TrainConfig.model_validate(other)
    # beside a nested table of the same method, the old key joins it
    cfg, said = _read(TrainConfig, None, {**train, "block_size": 4, "dflash": {"gamma": 2.0}})
    assert (cfg.dflash.block_size, cfg.dflash.gamma) == (4, 2.0) and len(said) == 1
    # a TOML table and `--set` with the dotted key: no deprecation
    toml = paths["py"].parent / "t.toml"
    toml.write_text("[dflash]\nblock_size = 6\n[peagle]\ndepths = 3\n")
    cfg, said = _read(TrainConfig, toml, train, ["dflash.max_anchors=9"])
    assert (cfg.dflash.block_size, cfg.dflash.max_anchors, cfg.peagle.depths) == (6, 9, 3)
    assert said == []


def test_an_old_method_flag_prints_one_line(paths):
    """`--block-size` is `--dflash.block-size`: one `deprecated:` line; given with the new
    flag at another value, one error and no traceback."""
    base = ["train", "--target", paths["target"], "--data", paths["data"], "--out", paths["out"]]
    res = CliRunner().invoke(app, [*base, "--block-size", "4", "--dflash.block-size", "5"])
    assert res.exit_code == 2, res.output
    assert _deprecated_lines(res.output) == [
        f"deprecated: --block-size is now --dflash.block-size; the old flag is read until {UNTIL}"
    ], res.output
    assert "--dflash.block-size and --block-size set dflash.block_size: give one" in res.output
    assert "Traceback" not in res.output
