"""Served evaluation: SGLang's per-request EAGLE counters (against the fake, which reports
them as SGLang does) and vLLM's Prometheus counters."""

import json

import pytest
from typer.testing import CliRunner

from eyas.backends.vllm.conventions import parse_spec_metrics
from eyas.cli import app
from eyas.evaluate.served import served_metrics
from eyas.testing.fake_sglang import FakeSGLang
from eyas.testing.server import fake_sglang_server

# The exposition vLLM 0.32 serves on /metrics for EAGLE-3 (counters with `_total`).
EXPOSITION = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="target"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="target"}} {draft_tokens}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="target"}} {accepted}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="target",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="target",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="target",position="2"}} {p2}
vllm:spec_decode_num_drafts_created{{engine="0",model_name="target"}} 1.7e9
"""


def test_vllm_counters_give_acceptance_per_position_and_histogram():
    before = parse_spec_metrics(
        EXPOSITION.format(drafts=10, draft_tokens=30, accepted=12, p0=6, p1=4, p2=2)
    )
    # then 247 drafts, 582 accepted: 221 / 188 / 173 per position (cpu-stack's measurement)
    after = parse_spec_metrics(
        EXPOSITION.format(drafts=257, draft_tokens=771, accepted=594, p0=227, p1=192, p2=175)
    )
    got = served_metrics(before, after, 3)
    assert got["verify_steps"] == 247
    assert got["acceptance_length"] == pytest.approx(1 + 582 / 247, abs=1e-4)
    assert got["per_position"] == [round(221 / 247, 4), round(188 / 221, 4), round(173 / 188, 4)]
    assert got["histogram"] == [247 - 221, 221 - 188, 188 - 173, 173]
    assert sum(got["histogram"]) == 247


def test_sglang_eval_reads_verify_counts(tmp_path, toy_tiny, toy_samples):
    with fake_sglang_server("--tokenizer", str(toy_tiny), "--spec-steps", "3") as url:
        res = CliRunner().invoke(
            app,
            [
                "eval",
                "--target",
                str(toy_tiny),
                "--drafter",
                str(tmp_path),
                "--input",
                str(toy_samples),
                "--backend",
                "sglang",
                "--url",
                url,
                "--k",
                "3",
                "--max-new-tokens",
                "200",
                "--no-lossless-check",
                "--json",
                str(tmp_path / "e.json"),
            ],
        )
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    fake = FakeSGLang(tokenizer_dir=str(toy_tiny), spec_steps=3)
    import zlib

    import orjson

    from eyas.render import Renderer

    stop = Renderer(toy_tiny).stop_token_ids()
    steps = produced = requests = 0
    for line in toy_samples.read_text().splitlines():
        prompt = json.loads(line)["prompt_ids"]
        ids, _ = fake._vocab_output(prompt, {"max_new_tokens": 200, "stop_token_ids": stop})
        steps += fake._spec_meta(len(ids), zlib.crc32(orjson.dumps(prompt)))["spec_verify_ct"]
        produced, requests = produced + len(ids), requests + 1
    assert out["verify_steps"] == steps
    assert out["acceptance_length"] == pytest.approx((produced - requests) / steps, abs=1e-4)
    assert out["sglang_accept_length"] == pytest.approx(produced / steps, abs=1e-4)
    assert out["lossless"] is None and out["settings"]["backend"] == "sglang"
    assert set(out["datasets"]) == {
        json.loads(x)["dataset"] for x in toy_samples.read_text().splitlines()
    }
