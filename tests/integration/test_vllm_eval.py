"""`eyas eval --backend vllm`: a trained toy drafter measured inside the real vLLM on CPU
agrees with offline evaluation, and the served decoding is lossless against the baseline
server (no target in this process); the servers eyas starts get the user's extra arguments.
The drafter is trained with eyas's defaults (sized down by data and steps only), the drafter a
user gets: its draft vocabulary is the toy's supervised tokens. A drafter over the toy's whole
vocabulary, which vLLM refused before the export shipped no d2t for it (issue 35), is served
too."""

import json

import pytest
from typer.testing import CliRunner

from eyas.cli import app

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def _offline_then_served(
    tmp_path, target, drafter, samples, vllm_python, *served_args, before_served=None
) -> tuple[dict, dict]:
    """`eyas eval` of DRAFTER offline, then served in vLLM (with SERVED_ARGS): both reports."""
    common = ["eval", "--target", str(target), "--drafter", str(drafter), "--input"]
    common += [str(samples), "--k", "3", "--max-new-tokens", "48"]
    offline = CliRunner().invoke(app, [*common, "--json", str(tmp_path / "off.json")])
    assert offline.exit_code == 0, offline.output
    if before_served:
        before_served()
    served = CliRunner().invoke(
        app,
        [
            *common,
            *("--backend", "vllm", "--engine-python", str(vllm_python)),
            *served_args,
            *("--json", str(tmp_path / "srv.json")),
        ],
    )
    assert served.exit_code == 0, served.output
    off = json.loads((tmp_path / "off.json").read_text())
    return off, json.loads((tmp_path / "srv.json").read_text())


def test_served_acceptance_agrees_with_offline(
    tmp_path, vllm_python, toy_tiny, toy_samples, trained_drafter, monkeypatch
):
    drafter_config = json.loads((trained_drafter / "drafter_config.json").read_text())
    # the default: the supervised tokens, fewer than the toy's vocabulary
    assert drafter_config["draft_vocab_size"] < drafter_config["vocab_size"]

    def refuse(*a, **k):
        raise AssertionError("served evaluation loaded the target in process")

    off, srv = _offline_then_served(
        tmp_path, toy_tiny, trained_drafter, toy_samples, vllm_python,
        "--engine-arg=--max-num-seqs=64",  # reaches both servers verbatim
        "--baseline",
        before_served=lambda: monkeypatch.setattr("eyas.hf_models.load_frozen_lm", refuse),
    )  # fmt: skip
    # served outputs equal the baseline server's, which agrees with itself across two runs
    assert srv["lossless"] is True
    check = srv["lossless_check"]
    assert check["prompts"] == len(toy_samples.read_text().splitlines())
    assert check["prompts_diverged"] == check["baseline_prompts_diverged"] == 0
    assert srv["verify_steps"] > 0 and sum(srv["histogram"]) == srv["verify_steps"]
    assert abs(srv["acceptance_length"] - off["acceptance_length"]) <= 0.25, (srv, off)
    assert srv["acceptance_length"] > 1  # the drafter's tokens are accepted, not just served
    assert srv["throughput"]["speedup"] > 0
    # the servers eyas started, as vLLM read their command lines (its "non-default args"
    # line): on CPU eager, the target's whole context, the user's flag
    for name in ("vllm-spec.log", "vllm-base.log"):
        line = next(
            x for x in (tmp_path / name).read_text().splitlines() if "non-default args" in x
        )
        assert "'enforce_eager': True" in line and "'max_num_seqs': 64" in line, line
        assert "'max_model_len': 4096" in line, line
    assert "speculative_config" in next(
        x for x in (tmp_path / "vllm-spec.log").read_text().splitlines() if "non-default args" in x
    )


def test_a_whole_vocabulary_drafter_is_served_as_trained(
    tmp_path, vllm_python, toy_tiny, toy_samples
):
    """Issue 35: `--draft-vocab` at the target's whole vocabulary exports no d2t/t2d (vLLM's
    `llama_eagle3.py` has no parameter for them then) and vLLM serves it, its drafts accepted
    as offline."""
    from eyas.train.loop import run_train
    from train_helpers import toy_train_config

    whole = json.loads((toy_tiny / "config.json").read_text())["vocab_size"]
    cfg = toy_train_config(
        toy_tiny, tmp_path / "t", data=toy_samples, steps=60, max_len=None, warmup_steps=5,
        checkpoint_every=1000, draft_vocab=whole,
    )  # fmt: skip
    drafter = run_train(cfg, log=lambda s: None).drafter
    assert json.loads((drafter / "drafter_config.json").read_text())["draft_vocab_size"] == whole
    off, srv = _offline_then_served(tmp_path, toy_tiny, drafter, toy_samples, vllm_python)
    assert srv["acceptance_length"] > 1
    assert abs(srv["acceptance_length"] - off["acceptance_length"]) <= 0.25, (srv, off)
