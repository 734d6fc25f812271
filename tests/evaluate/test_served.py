"""Served evaluation: SGLang's per-request EAGLE counters (against the fake, which reports
them as SGLang does) and vLLM's Prometheus counters (the fake vLLM exports them under vLLM's
names); the target is never loaded in process, and the lossless check compares with a
baseline server run twice."""

import asyncio
import json

import pytest
from typer.testing import CliRunner

from eyas.backends.base import Progress
from eyas.backends.policy import ClientPolicy, ServerPool
from eyas.backends.reasons import BackendError
from eyas.backends.vllm.acceptance import read_counters, served_metrics
from eyas.backends.vllm.conventions import parse_spec_metrics
from eyas.cli import app
from eyas.errors import RefusedError
from eyas.evaluate.served import first_divergence, lossless_report
from eyas.testing.fake_sglang import FakeSGLang
from eyas.testing.server import fake_sglang_server, fake_vllm_server

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


# -- served evaluation never loads the target; the lossless check against a baseline server --


@pytest.fixture
def no_target_in_process(monkeypatch):
    """Loading the target model in this process fails the test."""

    def refuse(*a, **k):
        raise AssertionError("served evaluation loaded the target in process")

    monkeypatch.setattr("eyas.hf_models.load_frozen_lm", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


def served_eval(tmp_path, toy_tiny, toy_samples, backend, url, *extra):
    out = tmp_path / f"{backend}-{len(list(tmp_path.glob('*.json')))}.json"
    args = ["eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples]
    args += ["--backend", backend, "--url", url, "--k", "3", "--max-new-tokens", "40"]
    res = CliRunner().invoke(app, [str(a) for a in [*args, *extra, "--json", out]])
    return res, (json.loads(out.read_text()) if out.exists() else None)


def test_one_token_answers_do_not_abort_sglang_eval_and_no_baseline_means_no_check(
    tmp_path, toy_tiny, toy_samples, no_target_in_process
):
    """SGLang writes `spec_verify_ct` only when a request had a verify step
    (`fill_spec_decoding_meta`): every third prompt here answers with one token, and its
    response carries no count."""
    with fake_sglang_server("--spec-steps", "3", "--short-every", "3") as url:
        res, out = served_eval(tmp_path, toy_tiny, toy_samples, "sglang", url)
    assert res.exit_code == 0, res.output
    import zlib

    import orjson

    prompts = [json.loads(x)["prompt_ids"] for x in toy_samples.read_text().splitlines()]
    short = sum(zlib.crc32(orjson.dumps(p)) % 3 == 0 for p in prompts)
    assert 0 < short < len(prompts)
    assert out["verify_steps"] > 0 and out["settings"]["prompts"] == len(prompts)
    assert out["lossless"] is None and out["lossless_check"]["note"].startswith("off: no baseline")


def test_sglang_lossless_check_runs_against_a_baseline_server_twice(
    tmp_path, toy_tiny, toy_samples, no_target_in_process
):
    with fake_sglang_server("--spec-steps", "3") as spec, fake_sglang_server() as base:
        res, out = served_eval(
            tmp_path, toy_tiny, toy_samples, "sglang", spec, "--baseline-url", base
        )
    assert res.exit_code == 0, res.output
    check = out["lossless_check"]
    assert out["lossless"] is True and check["prompts"] == out["settings"]["prompts"]
    assert check["prompts_diverged"] == check["baseline_prompts_diverged"] == 0
    assert check["match_rate"] == 1.0
    assert all(p["first_divergence"] is None for p in check["per_prompt"])


def test_vllm_eval_with_urls_reads_counters_and_checks_against_the_baseline(
    tmp_path, toy_tiny, toy_samples, no_target_in_process
):
    with fake_vllm_server("--spec-k", "3") as spec, fake_vllm_server() as base:
        res, out = served_eval(
            tmp_path, toy_tiny, toy_samples, "vllm", spec, "--baseline-url", base
        )
    assert res.exit_code == 0, res.output
    assert out["lossless"] is True and out["verify_steps"] > 0
    assert sum(out["histogram"]) == out["verify_steps"]
    # the fake's counters are seeded by each prompt: replay them for the exact figures
    import zlib

    import orjson

    from eyas.render import Renderer
    from eyas.testing.fake_sglang import FaultInjector, fake_output
    from eyas.testing.fake_vllm import FakeVLLM

    fake = FakeVLLM(FaultInjector(), spec_k=3)
    stop = Renderer(toy_tiny).stop_token_ids()
    for line in toy_samples.read_text().splitlines():
        prompt = json.loads(line)["prompt_ids"]
        ids, _ = fake_output(prompt, 40, stop)
        fake._count_spec(len(ids), zlib.crc32(orjson.dumps(prompt)))
    drafts, accepted = fake.spec["num_drafts"], fake.spec["num_accepted_tokens"]
    assert out["verify_steps"] == drafts
    assert out["acceptance_length"] == pytest.approx(1 + accepted / drafts, abs=1e-4)
    reached = [drafts, *fake.per_pos[:-1]]
    assert out["per_position"] == [round(p / r, 4) for p, r in zip(fake.per_pos, reached)]
    assert out["throughput"]["speedup"] > 0


def test_a_vllm_server_without_a_drafter_is_an_error_not_zero(
    tmp_path, toy_tiny, toy_samples, no_target_in_process
):
    with fake_vllm_server() as plain:
        res, out = served_eval(tmp_path, toy_tiny, toy_samples, "vllm", plain)
    assert res.exit_code == 2 and "[no_speculation]" in res.output and out is None


def test_outputs_that_diverge_from_the_baseline_fail_the_check(
    tmp_path, toy_tiny, toy_samples, no_target_in_process
):
    corrupt = fake_vllm_server("--spec-k", "3", "--corrupt-every", "2")
    with corrupt as spec, fake_vllm_server() as base:
        res, out = served_eval(
            tmp_path, toy_tiny, toy_samples, "vllm", spec, "--baseline-url", base
        )
    assert res.exit_code == 1 and "NOT LOSSLESS" in res.output
    check = out["lossless_check"]
    assert out["lossless"] is False and check["baseline_prompts_diverged"] == 0
    diverged = [p for p in check["per_prompt"] if p["first_divergence"] is not None]
    assert diverged and {p["first_divergence"] for p in diverged} == {2}
    assert sorted(out["lossless_mismatches"]) == sorted(p["id"] for p in diverged)


def test_divergence_fails_only_beyond_what_the_baseline_shows_between_its_own_runs():
    base = {"a": [1, 2, 3, 4], "b": [5, 6, 7], "c": [8, 9], "d": [1, 1]}
    again = {**base, "a": [1, 2, 9, 9], "b": [5, 6, 0]}  # GPU-like: two prompts differ
    spec = {**base, "c": [8, 7], "d": [1, 1, 1]}  # two others differ
    report = lossless_report(list(base), spec, base, again)
    assert report["lossless"] is True
    check = report["check"]
    assert (check["prompts_diverged"], check["baseline_prompts_diverged"]) == (2, 2)
    per = {p["id"]: p for p in check["per_prompt"]}
    assert per["c"]["first_divergence"] == 1 and per["c"]["token_match_rate"] == 0.5
    assert per["d"]["first_divergence"] == 2 and per["a"]["baseline_first_divergence"] == 2
    worse = lossless_report(list(base), {**spec, "a": [0]}, base, again)
    assert worse["lossless"] is False and sorted(worse["mismatches"]) == ["a", "c", "d"]
    assert first_divergence([1, 2], [1, 2]) is None and first_divergence([1], [1, 2]) == 1


class _CountersBackend:
    """A vLLM backend whose /metrics read fails `failures` times with `reason`, then answers."""

    name, lossy, url = "vllm", False, "http://127.0.0.1:9"

    def __init__(self, failures: int, reason: str = "connection_error"):
        self.failures, self.reason, self.reads = failures, reason, 0

    async def spec_metrics(self):
        self.reads += 1
        if self.reads <= self.failures:
            raise BackendError(self.reason, "Cannot connect to host")
        return {"present": True, "drafts": 1.0, "accepted_per_pos": [1.0]}

    async def progress(self):
        return Progress(alive=True)


def _counter_pool(backend) -> ServerPool:
    return ServerPool([backend], ClientPolicy(concurrency=1, max_attempts=2, backoff_s=0.01))


def test_counters_unreadable_after_retries_stop_the_run_as_a_dead_server_does():
    """A server killed between two datasets is first met by the counters read: it stops the
    run with `servers_failing`, the last reason and the retries named, as a request would."""
    pool = _counter_pool(backend := _CountersBackend(failures=5))
    with pytest.raises(RefusedError) as exc:
        asyncio.run(read_counters(pool))
    assert exc.value.reason == "servers_failing"
    assert "(last: connection_error)" in str(exc.value)
    assert "retried: {'connection_error': 1}" in str(exc.value)
    assert backend.reads == 2  # max_attempts, no more


def test_counters_read_is_retried_and_a_permanent_answer_is_not():
    pool = _counter_pool(backend := _CountersBackend(failures=1))
    assert asyncio.run(read_counters(pool))["drafts"] == 1.0
    assert backend.reads == 2 and pool.retry_reasons == {"connection_error": 1}
    pool = _counter_pool(backend := _CountersBackend(failures=5, reason="http_error"))
    with pytest.raises(RefusedError) as exc:
        asyncio.run(read_counters(pool))
    assert exc.value.reason == "http_error" and backend.reads == 1
