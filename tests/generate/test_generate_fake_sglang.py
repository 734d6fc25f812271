"""Generation against the fake SGLang server: exactness, faults, resume after SIGKILL, shards."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from generate_cli import generate, generate_args

from eyas.render import Renderer
from eyas.store import committed_ids, read_samples
from eyas.testing.fake_sglang import fake_output
from eyas.testing.server import fake_sglang_server


def rendered_rows(prep):
    rows = []
    for f in sorted((prep / "rendered").glob("*.jsonl")):
        if not f.name.endswith(".errors.jsonl"):
            rows += [json.loads(x) for x in f.read_text().splitlines()]
    return rows


def test_exact_ids_round_trip(tmp_path, kimi_dir, rendered):
    stop = Renderer(kimi_dir).stop_token_ids()
    with fake_sglang_server() as url:
        res = generate(
            generate_args(
                str(kimi_dir),
                "sglang",
                str(rendered),
                "--url",
                url,
                "--out",
                str(tmp_path / "gen"),
                "--max-new-tokens",
                "300",
            )
        )
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in rendered_rows(rendered)}
    samples = list(read_samples(tmp_path / "gen"))
    assert sorted(s.id for s in samples) == sorted(rows)
    finishes = set()
    for s in samples:
        assert s.prompt_ids == rows[s.id]["prompt_ids"]
        expected, finish = fake_output(s.prompt_ids, 300, stop)
        assert s.output_ids == expected
        assert s.finish_reason == finish["type"]
        assert s.matched_stop == (finish.get("matched"))
        assert s.sampling == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 300}
        assert s.backend == "sglang" and s.attempts == 1
        finishes.add(s.finish_reason)
    assert finishes == {"stop", "length"}
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["counts"]["samples"] == len(rows)
    assert manifest["backend"]["servers"][0]["model_path"] == "/models/fake"
    assert manifest["render"]["stop_token_ids"] == stop


@pytest.mark.parametrize("batch", ["1", "8"])
def test_faults_are_retried_or_recorded_never_dropped(tmp_path, kimi_dir, rendered, batch):
    faults = "500,503,429,400,reset,malformed,abort,slow,hang"
    with fake_sglang_server(
        "--fault-rate",
        "0.15",
        "--faults",
        faults,
        "--seed",
        "3",
        "--hang-s",
        "3",
        "--slow-s",
        "0.2",
    ) as url:
        res = generate(
            generate_args(
                str(kimi_dir),
                "sglang",
                str(rendered),
                "--url",
                url,
                "--out",
                str(tmp_path / "gen"),
                "--max-new-tokens",
                "50",
                "--timeout",
                "1",
                "--max-attempts",
                "6",
                "--concurrency",
                "16",
                "--batch-size",
                batch,
            )
        )
    assert res.exit_code == 0, res.output
    ids = {r["id"] for r in rendered_rows(rendered)}
    done = committed_ids(tmp_path / "gen")
    errors = [json.loads(x) for x in (tmp_path / "gen" / "errors.jsonl").read_text().splitlines()]
    failed = {e["id"] for e in errors}
    assert done | failed == ids and not done & failed  # every id accounted for exactly once
    # only a 400 is permanent (test_a_bad_request_is_permanent shows it happening)
    assert all(e["reason"] == "bad_request" for e in errors)
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())["this_run"]
    assert manifest["retries"] > 0
    retried = set(manifest["retry_reasons"])
    assert retried and retried <= {
        "server_error",
        "rate_limited",
        "connection_error",
        "malformed_response",
        "server_abort",
        "timeout",
    }
    # batch 1 makes one call per request, so several fault kinds are met; batch 8 few calls
    assert len(retried) >= (3 if batch == "1" else 1)
    assert manifest["failed"] == len(failed)


@pytest.mark.parametrize("batch", ["1", "8"])
def test_a_bad_request_is_permanent_and_recorded(tmp_path, kimi_dir, rendered, batch):
    with fake_sglang_server("--fault-rate", "0.5", "--faults", "400", "--seed", "1") as url:
        res = generate(
            generate_args(
                str(kimi_dir),
                "sglang",
                str(rendered),
                "--url",
                url,
                "--out",
                str(tmp_path / "gen"),
                "--max-new-tokens",
                "20",
                "--batch-size",
                batch,
            )
        )
    assert res.exit_code == 0, res.output
    errors = [json.loads(x) for x in (tmp_path / "gen" / "errors.jsonl").read_text().splitlines()]
    assert errors and {e["reason"] for e in errors} == {"bad_request"}
    assert all(e["attempts"] == 1 for e in errors)  # never retried
    done = committed_ids(tmp_path / "gen")
    assert done | {e["id"] for e in errors} == {r["id"] for r in rendered_rows(rendered)}


def test_two_servers_and_shards_cover_everything_once(tmp_path, kimi_dir, rendered):
    ids = {r["id"] for r in rendered_rows(rendered)}
    got = []
    with fake_sglang_server() as a, fake_sglang_server() as b:
        for i in range(3):
            out = tmp_path / f"shard{i}"
            res = generate(
                generate_args(
                    str(kimi_dir),
                    "sglang",
                    str(rendered),
                    "--url",
                    a,
                    "--url",
                    b,
                    "--out",
                    str(out),
                    "--max-new-tokens",
                    "20",
                    "--shard",
                    f"{i}/3",
                )
            )
            assert res.exit_code == 0, res.output
            got.append(committed_ids(out))
    assert set().union(*got) == ids
    assert sum(len(g) for g in got) == len(ids)
    assert all(got)


def test_fingerprint_mismatch_is_refused(tmp_path, qwen_dir, rendered):
    res = generate(
        generate_args(
            str(qwen_dir),
            "sglang",
            str(rendered),
            "--url",
            "http://127.0.0.1:1",
            "--out",
            str(tmp_path / "g"),
        )
    )
    assert res.exit_code == 1 and "fingerprint_mismatch" in res.output


@pytest.mark.slow
def test_sigkill_five_times_then_resume_equals_uninterrupted(tmp_path, kimi_dir, rendered):
    args = generate_args(
        str(kimi_dir),
        "sglang",
        str(rendered),
        "--max-new-tokens",
        "40",
        "--concurrency",
        "2",
        "--shard-size",
        "5",
        "--no-progress",
    )
    rng = random.Random(11)
    with fake_sglang_server("--fault-rate", "1.0", "--faults", "slow", "--slow-s", "0.06") as url:
        ref = generate([*args[:-1], "--url", url, "--out", str(tmp_path / "ref")])
        assert ref.exit_code == 0, ref.output
        out = tmp_path / "killed"
        cmd = [sys.executable, "-m", "eyas.cli", "generate", *args, "--url", url, "--out", str(out)]
        kills = 0
        while kills < 5:
            before = len(list(out.glob("part-*.parquet")))
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.time() + 60
            # Wait until this run commits something, then kill at a random moment after.
            while len(list(out.glob("part-*.parquet"))) == before and time.time() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 0.4))
            if proc.poll() is not None:
                break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        assert kills == 5
        partial = len(committed_ids(out))
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
    ids = [s.id for s in read_samples(out)]
    assert len(ids) == len(set(ids))  # exactly one sample per id
    assert 0 < partial < len(ids)
    key = lambda s: (s.id, tuple(s.prompt_ids), tuple(s.output_ids), s.finish_reason)  # noqa: E731
    assert sorted(map(key, read_samples(out))) == sorted(map(key, read_samples(tmp_path / "ref")))
    assert not list(out.glob(".part-*"))


def test_sigint_flushes_and_leaves_a_resumable_run(tmp_path, kimi_dir, rendered):
    args = generate_args(
        str(kimi_dir),
        "sglang",
        str(rendered),
        "--max-new-tokens",
        "40",
        "--concurrency",
        "2",
        "--shard-size",
        "5",
        "--no-progress",
    )
    out = tmp_path / "g"
    with fake_sglang_server("--fault-rate", "1.0", "--faults", "slow", "--slow-s", "0.05") as url:
        cmd = [sys.executable, "-m", "eyas.cli", "generate", *args, "--url", url, "--out", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not list(out.glob("part-*.parquet")) and time.time() < deadline:
            time.sleep(0.02)  # running: at least one shard committed
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "rerun the same command to resume" in err
        first = committed_ids(out)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["complete"] is False and len(first) == manifest["counts"]["samples"] > 0
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    assert len(committed_ids(out)) == len(rendered_rows(rendered))


def test_openai_chat_backend_is_marked_lossy_and_the_audit_fails_it(tmp_path, kimi_dir, rendered):
    from eyas.audit import run_audit

    with fake_sglang_server() as url:
        res = generate(
            generate_args(
                str(kimi_dir),
                "openai_chat",
                str(rendered / "rendered" / "b4_sharegpt.jsonl"),
                "--url",
                url,
                "--out",
                str(tmp_path / "g"),
                "--max-new-tokens",
                "30",
            )
        )
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["backend"]["lossy"] is True
    samples = list(read_samples(tmp_path / "g"))
    assert samples and all(s.backend == "openai_chat" for s in samples)
    result = run_audit(tmp_path / "g", kimi_dir)
    lossy = [f for f in result.findings if f.check == "lossy-backend"]
    assert lossy and lossy[0].severity == "error" and lossy[0].count == len(samples)


def test_a_dead_server_stops_the_run_resumably_instead_of_failing_every_row(
    tmp_path, kimi_dir, rendered
):
    args = generate_args(
        str(kimi_dir),
        "sglang",
        str(rendered),
        "--out",
        str(tmp_path / "gen"),
        "--max-new-tokens",
        "20",
        "--concurrency",
        "2",
        "--batch-size",
        "1",
    )
    ids = {r["id"] for r in rendered_rows(rendered)}
    with fake_sglang_server("--fault-rate", "1.0", "--faults", "503") as url:
        res = generate(
            [*args, "--url", url, "--max-attempts", "2", "--max-consecutive-failures", "5"]
        )
    assert res.exit_code == 1, res.output
    assert "servers_failing" in res.output
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())
    assert not manifest["complete"]
    assert manifest["stopped_reason"].startswith("servers_failing: 5 requests in a row")
    errors = (tmp_path / "gen" / "errors.jsonl").read_text().splitlines()
    assert 5 <= len(errors) <= 5 + 2  # the breaker plus what was in flight
    assert len(ids) > 20 and not committed_ids(tmp_path / "gen")
    with fake_sglang_server() as url:  # the server is back: rerun resumes everything
        res = generate([*args, "--url", url])
    assert res.exit_code == 0, res.output
    assert committed_ids(tmp_path / "gen") == ids
    assert (tmp_path / "gen" / "errors.jsonl").read_text() == ""
