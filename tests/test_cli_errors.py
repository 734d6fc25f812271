"""Every command turns a user mistake into one `error:` line and exit code 2 (a refusal on
purpose: 1), never a traceback."""

import json

import pytest
from typer.testing import CliRunner

from eyas.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_user_error(result, needle: str, code: int = 2):
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0].startswith("error: "), result.output
    assert needle in result.output, result.output


def test_convert(tmp_path):
    assert_user_error(
        run("convert", tmp_path / "missing.jsonl", tmp_path / "o.jsonl"), "does not exist"
    )
    (tmp_path / "a.jsonl").write_text('{"x": 1}\n')
    assert_user_error(
        run("convert", "--format", "nope", tmp_path / "a.jsonl", tmp_path / "o.jsonl"),
        "unknown source format 'nope'",
    )


def test_render(tmp_path, kimi_dir):
    conv = tmp_path / "c.jsonl"
    conv.write_text(
        '{"id": "a", "dataset": "d", "messages": [{"role": "user", "content": "hi"}]}\n'
    )
    assert_user_error(
        run("render", "--model", tmp_path / "nowhere", conv, tmp_path / "r.jsonl"), "does not exist"
    )
    no_template = tmp_path / "tok"
    no_template.mkdir()
    for name in ("tokenizer.json", "special_tokens_map.json"):
        if (kimi_dir / name).exists():
            (no_template / name).write_bytes((kimi_dir / name).read_bytes())
    cfg = json.loads((kimi_dir / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (no_template / "tokenizer_config.json").write_text(json.dumps(cfg))
    assert_user_error(
        run("render", "--model", no_template, conv, tmp_path / "r.jsonl"), "no chat template"
    )
    assert_user_error(
        run("render", "--model", kimi_dir, tmp_path / "none.jsonl", tmp_path / "r.jsonl"),
        "does not exist",
    )
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert_user_error(
        run("render", "--model", kimi_dir, tmp_path / "bad.jsonl", tmp_path / "r.jsonl"),
        "not valid JSON",
    )
    assert_user_error(
        run("render", "--model", kimi_dir, "--profile", "kimi-k9", conv, tmp_path / "r.jsonl"),
        "unknown profile 'kimi-k9'",
    )


def test_prepare_and_generate_configs(tmp_path, kimi_dir):
    (tmp_path / "bad.toml").write_text("[model\n")
    assert_user_error(run("prepare", "--config", tmp_path / "bad.toml"), "not valid TOML")
    (tmp_path / "typo.toml").write_text(f'[model]\ndir = "{kimi_dir}"\n[backend]\nconcurency = 3\n')
    assert_user_error(run("prepare", "--config", tmp_path / "typo.toml"), "concurency")
    assert_user_error(run("prepare", "--config", tmp_path / "none.toml"), "does not exist")
    ok = tmp_path / "ok.toml"
    ok.write_text(f'[model]\ndir = "{kimi_dir}"\n')
    assert_user_error(run("prepare", "--config", ok), "no [[datasets]]")
    base = ["generate", "--model", kimi_dir, "--input", tmp_path / "none", "--out", tmp_path / "g"]
    assert_user_error(run(*base, "--backend", "sglang", "--url", "localhost:30000"), "not an http")
    assert_user_error(run(*base), "does not exist")
    assert_user_error(
        run(*base, "--backend", "sglang", "--url", "http://a", "--set", "backend.concurrency=0"),
        "backend.concurrency",
    )
    assert_user_error(
        run(*base, "--concurrency", "4", "--set", "backend.concurrency=8"), "conflicts"
    )
    assert_user_error(run(*base, "--set", "backend.nope=1"), "backend.nope")
    assert_user_error(run(*base, "--shard", "3/2"), "shard")


def test_audit_and_show(tmp_path):
    assert_user_error(run("audit", tmp_path / "missing"), "does not exist")
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    assert_user_error(run("audit", tmp_path / "bad.jsonl"), "lacks")
    assert_user_error(run("audit", tmp_path / "bad.jsonl", "--sample", "many"), "--sample")
    assert_user_error(run("show", tmp_path / "missing", "abc"), "does not exist")


@pytest.mark.slow
def test_train_capture_export_eval(tmp_path, toy_tiny):
    out = tmp_path / "o"
    assert_user_error(
        run(
            "train", "--target", tmp_path / "nothing", "--data", tmp_path / "d.jsonl", "--out", out
        ),
        "does not exist",
    )
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(
        json.dumps(
            {
                "id": "x1",
                "prompt_ids": [1, 2, 3],
                "output_ids": [5, 99999, 7],
                "finish_reason": "stop",
            }
        )
        + "\n"
    )
    assert_user_error(
        run("train", "--target", toy_tiny, "--data", foreign, "--out", out, "--steps", 1),
        "99999",
    )
    assert_user_error(run("train", "--target", toy_tiny, "--out", out), "--data")
    assert_user_error(
        run("capture", "--target", tmp_path / "no", "--data", foreign, "--out", tmp_path / "c"),
        "does not exist",
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_user_error(
        run(
            "export",
            "drafter",
            "--checkpoint",
            empty,
            "--format",
            "sglang",
            "--out",
            tmp_path / "e",
        ),
        "not a drafter",
    )
    assert_user_error(run("export", "check", tmp_path / "none"), "does not exist")
    assert_user_error(
        run(
            "export", "samples", tmp_path / "none", "--format", "specforge", "--out", tmp_path / "s"
        ),
        "does not exist",
    )
    assert_user_error(
        run("eval", "--target", tmp_path / "no", "--drafter", empty, "--input", foreign),
        "does not exist",
    )
    assert_user_error(run("toy", "build", "--preset", "huge"), "'huge' is not one of")


def assert_refused_after_setup(result, reason: str):
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and reason in result.output, result.output


def test_a_resume_with_options_that_build_another_drafter_is_refused(
    tmp_path, toy_tiny, toy_samples
):
    """A resume's setup logs come first (the drafter is built to compare it), then one
    error line. DCP loads only the tensors it is asked for: resumed with another --draft-vocab, a run
    failed deep in DCP on a shape; resumed with the draft head frozen, it would have dropped the
    trained head silently. Both are one error naming the option, and the checkpoint is kept."""
    out = tmp_path / "o"
    base = ["train", "--target", toy_tiny, "--data", toy_samples, "--out", out, "--ttt", 1]
    base += ["--batch-tokens", 3000, "--max-len", 1024, "--checkpoint-every", 1]
    first = run(*base, "--steps", 1)
    assert first.exit_code == 0, first.output
    saved = json.loads((out / "checkpoints" / "step-0000001" / "drafter_config.json").read_text())
    other = saved["draft_vocab_size"] // 2  # the default is every supervised token: fewer
    result = run(*base, "--steps", 2, "--draft-vocab", other)
    assert_refused_after_setup(result, "checkpoint_mismatch")
    assert f"draft_vocab_size {saved['draft_vocab_size']} saved, {other} now" in result.output
    assert "d2t" in result.output
    frozen = run(*base, "--steps", 2, "--eagle3.draft-head", "frozen")
    assert_refused_after_setup(frozen, "checkpoint_mismatch")
    assert "'trained' saved, 'frozen' now" in frozen.output
    assert "lm_head.weight" in frozen.output  # held by the checkpoint, not by a frozen head
    assert [p.name for p in (out / "checkpoints").glob("step-*")] == ["step-0000001"]
    again = run(*base, "--steps", 2)  # the options it was started with: it resumes
    assert again.exit_code == 0, again.output
    assert (out / "checkpoints" / "step-0000002").is_dir()
