"""The same faults, in the same order, in front of every stage that talks to an engine:
generate (fake SGLang), capture in batch and streamed in training (fake vLLM with capture
files), and served evaluation (fake SGLang with EAGLE counters). All four go through the one
client policy, so they report the same retries and the same failure, by the same reason codes.

The schedule hits the first requests: 500, 503, 429, a reset connection, a malformed body, an
abort, a slow answer, a hung one (2 s, more than twice the 0.8 s timeout, on a server that
keeps working: never resubmitted), then a 400.
"""

import json

import pytest
from typer.testing import CliRunner

from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.cli import app
from eyas.errors import EyasError
from eyas.testing.server import fake_server
from eyas.train.loop import run_train
from train_helpers import toy_train_config

pytestmark = pytest.mark.slow

SCHEDULE = "500,503,429,reset,malformed,abort,slow,hang,400"
FAKE = ("--fault-schedule", SCHEDULE, "--hang-s", "2.0", "--slow-s", "0.3")
TIMEOUT = "0.8"
RETRIES = {
    "server_error": 2,
    "rate_limited": 1,
    "connection_error": 1,
    "malformed_response": 1,
    "server_abort": 1,
}
FAILURES = {"bad_request": 1}


def args(*parts) -> list[str]:
    return [str(p) for p in parts]


def _errors(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_generate_capture_stream_and_eval_report_the_same_faults_the_same_way(
    tmp_path, kimi_dir, rendered_prompts, toy_tiny, toy_samples
):
    seen = {}
    with fake_server("eyas.testing.fake_sglang", *FAKE) as srv:
        res = CliRunner().invoke(
            app,
            args(
                *("generate", "--model", kimi_dir, "--backend", "sglang", "--url", srv.url),
                *("--input", rendered_prompts, "--out", tmp_path / "gen", "--batch-size", "1"),
                *("--concurrency", "8", "--no-adaptive-concurrency", "--timeout", TIMEOUT),
                *("--max-attempts", "10", "--max-new-tokens", "20", "--no-progress"),
                *("--set", "backend.retry.backoff_s=0.01"),
            ),
        )
        assert res.exit_code == 0, res.output
        run = json.loads((tmp_path / "gen" / "manifest.json").read_text())["this_run"]
        seen["generate"] = (run["retry_reasons"], run["failure_reasons"])
        assert [e["reason"] for e in _errors(tmp_path / "gen" / "errors.jsonl")] == ["bad_request"]

    cap = tmp_path / "incoming"
    vllm_fake = (*FAKE, "--capture-dir", str(cap), "--layers", "4", "--hidden", "96")
    with fake_server("eyas.testing.fake_vllm", *vllm_fake) as srv:
        cfg = CaptureConfig(
            target=toy_tiny,
            data=toy_samples,
            out=tmp_path / "cap",
            backend="vllm",
            urls=[srv.url],
            concurrency=8,
            adaptive_concurrency=False,
            timeout_s=float(TIMEOUT),
            max_attempts=10,
            dtype="float32",
        )
        manifest = run_capture(cfg, log=lambda s: None)
        seen["capture"] = (manifest.this_run.retry_reasons, manifest.failure_reasons)
        assert manifest.counts.samples == len(toy_samples.read_text().splitlines()) - 1
        assert not list(cap.glob("*.safetensors"))  # every file read, the torn ones removed

    with fake_server("eyas.testing.fake_vllm", *vllm_fake) as srv:
        out = tmp_path / "train"
        cfg = toy_train_config(
            toy_tiny,
            out,
            data=toy_samples,
            capture_ahead=2,
            capture_backend="vllm",
            capture_urls=[srv.url],
            steps=4,
        )
        with pytest.raises(EyasError) as info:  # a batch cannot train without its rows
            run_train(cfg, log=lambda s: None)
        assert info.value.reason == "capture_failed" and "bad_request" in info.value.detail
        client = json.loads((out / "spool" / "client.json").read_text())
        failures = [e["reason"] for e in _errors(out / "spool" / "errors.jsonl")]
        seen["streamed capture"] = (client["retry_reasons"], dict.fromkeys(failures, 1))

    with fake_server("eyas.testing.fake_sglang", *FAKE, "--spec-steps", "3") as srv:
        res = CliRunner().invoke(
            app,
            args(
                *("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples),
                *("--backend", "sglang", "--url", srv.url, "--max-new-tokens", "32"),
                *("--no-lossless-check", "--timeout", TIMEOUT, "--json", tmp_path / "e.json"),
                *("--set", "retry.max_attempts=10", "--set", "retry.backoff_s=0.01"),
            ),
        )
        assert res.exit_code == 0, res.output
        requests = json.loads((tmp_path / "e.json").read_text())["requests"]
        seen["served eval"] = (requests["retry_reasons"], requests["failure_reasons"])

    assert seen == dict.fromkeys(seen, (RETRIES, FAILURES)), seen
    assert len(seen) == 4
