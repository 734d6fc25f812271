"""One run folder written by many jobs at once, as docs/cluster.md runs them (at toy scale, as
local processes): four `eyas generate` jobs (two with --shard, one SIGKILLed then restarted,
one SIGTERMed) against the fake SGLang server, two `eyas capture` jobs (one SIGTERMed, then
rerun) against the fake vLLM, then `eyas status`, `eyas audit` and `eyas train`: every
sample is read exactly once and no job leaves a process behind.

Slow (about a minute): it starts ten real processes, which is the point; the commands that
need no signal run in process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from eyas.cli import app
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import load_table, select_trainable
from eyas.store.captures import capture_counts, read_capture_index
from eyas.store.shards import id_index
from eyas.testing.server import fake_server
from eyas.toy.datasets import FAMILIES, family_rows

pytestmark = pytest.mark.slow

EYAS = [sys.executable, "-m", "eyas.cli"]
runner = CliRunner()


def cli(args: list[str]):
    """A command that needs no signal runs in process (a new interpreter costs seconds)."""
    return runner.invoke(app, args)


@pytest.fixture(scope="module")
def prep(module_tmp, toy_tiny):
    """About 40 prompts rendered for the toy target (the fake server answers in its vocab)."""
    root = module_tmp("prep")
    renderer = Renderer(toy_tiny)
    for name in ("b4_sharegpt", "b5_ultrachat"):
        fam = next(f for f in FAMILIES if f.name == name)
        src = root / f"{name}.src.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 20, seed=8)))
        convert_file(src, root / "conv" / f"{name}.jsonl", fam.format, name)
        render_file(
            renderer, root / "conv" / f"{name}.jsonl", root / "prep" / "rendered" / f"{name}.jsonl"
        )
    return root / "prep"


def rendered_ids(prep: Path) -> set[str]:
    ids = set()
    for f in (prep / "rendered").glob("*.jsonl"):
        if not f.name.endswith(".errors.jsonl"):
            ids |= {json.loads(x)["id"] for x in f.read_text().splitlines()}
    return ids


def job_of(stage: Path, proc: subprocess.Popen, timeout: float = 60) -> str:
    """The job id a process registered in the stage folder."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for rec in (stage / "jobs").glob("*.json"):
            try:
                data = json.loads(rec.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            if data.get("pid") == proc.pid:
                return data["job_id"]
        assert proc.poll() is None, f"job exited {proc.returncode} before registering"
        time.sleep(0.05)
    raise AssertionError("job never registered")


def wait_for_commit(stage: Path, job: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while not list(stage.glob(f"part-{job}-*")):
        assert proc.poll() is None, f"job exited {proc.returncode} before committing"
        assert time.time() < deadline, "job committed nothing"
        time.sleep(0.05)


def assert_no_process_left(run: Path, servers: set[int]) -> None:
    """No process of any job lives on: none is a child of this test (servers aside) and none
    names the run folder on its command line."""
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.pid not in servers]
    named = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] not in servers and any(str(run) in a for a in p.info["cmdline"] or []):
            named.append(p.info)
    assert not left and not named, (left, named)


def test_four_generate_jobs_and_two_capture_jobs_share_one_run(tmp_path, toy_tiny, prep):
    run = tmp_path / "run"
    gen = run / "generate"
    cap = run / "capture"
    expected = rendered_ids(prep)
    generate = [
        *EYAS,
        "generate",
        "--model",
        str(toy_tiny),
        "--backend",
        "sglang",
        "--input",
        str(prep),
        "--out",
        str(gen),
        "--max-new-tokens",
        "48",
        "--concurrency",
        "1",
        "--shard-size",
        "2",
        "--no-progress",
    ]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    # the shared node serves two requests at a time, 0.5 s each: A and D need several seconds
    # for the run, so C (its own node, one request at a time) commits before the run is done
    shared = ("--tokenizer", str(toy_tiny), "--capacity", "2", "--service-s", "0.5")
    # B's and C's nodes: one request at a time, 0.2 s each, so neither can finish its slice in
    # the moments between its first commit and the freeze, however fast this machine is
    slow = ("--tokenizer", str(toy_tiny), "--capacity", "1", "--service-s", "0.2")
    with (
        fake_server("eyas.testing.fake_sglang", *shared) as sglang,
        fake_server("eyas.testing.fake_sglang", *slow) as doomed,
        fake_server("eyas.testing.fake_sglang", *slow) as slow_node,
    ):
        cmd = [*generate, "--url", sglang.url]
        a = subprocess.Popen([*cmd, "--shard", "0/2"], **quiet)
        # B's node: once B has committed, its server freezes, so B cannot finish before it is
        # killed (a fast node let B finish its whole slice before the freeze on CI's machine)
        b = subprocess.Popen([*generate, "--url", doomed.url, "--shard", "1/2"], **quiet)
        # C's node is slow and freezes once C has committed: C is still working when its
        # SIGTERM comes, however fast this machine is (on an idle machine the other jobs could
        # otherwise finish the run and C exit 0 before the signal); it commits, waits out its
        # grace for the request in flight and exits 143
        c = subprocess.Popen([*generate, "--url", slow_node.url], **quiet)
        d = subprocess.Popen(cmd, **quiet)
        b_job, c_job = job_of(gen, b), job_of(gen, c)
        wait_for_commit(gen, b_job, b)
        doomed.freeze()
        wait_for_commit(gen, c_job, c)
        slow_node.freeze()
        c.send_signal(signal.SIGTERM)  # what Slurm and Kubernetes send first
        b.kill()  # a node lost: no chance to commit or record anything
        b.wait()
        _, err = c.communicate(timeout=60)
        assert c.returncode == 143, err
        assert "rerun the same command to resume" in err
        b2 = subprocess.Popen([*cmd, "--shard", "1/2"], **quiet)  # the array task, requeued
        for proc in (a, b2, d):
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        assert_no_process_left(run, {sglang.proc.pid, doomed.proc.pid, slow_node.proc.pid})

    # eyas status: five jobs, which ended how, and the run is complete
    status = cli(["status", str(run), "--json", str(tmp_path / "status.json")])
    assert status.exit_code == 0, status.output
    (stage,) = json.loads((tmp_path / "status.json").read_text())
    assert stage["stage"] == "generate" and stage["complete"] is True
    states = sorted(j["state"] for j in stage["jobs"])
    assert states == ["complete", "complete", "complete", "died", "stopped"]
    (stopped,) = [j for j in stage["jobs"] if j["state"] == "stopped"]
    assert stopped["job_id"] == c_job and stopped["stopped_reason"] == "terminated"
    assert stage["temporary_files"] == 0

    # every reader sees each id exactly once; racing duplicates are dropped and counted
    table = load_table(gen)
    assert sorted(table.ids) == sorted(expected)
    committed, duplicates = id_index(gen)
    assert committed == expected and table.duplicates == duplicates == stage["duplicates"]
    audit = cli(["audit", str(gen), "--model", str(toy_tiny), "--json", str(tmp_path / "a.json")])
    assert audit.exception is None or isinstance(audit.exception, SystemExit), audit.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["num_samples"] == len(expected)
    assert report["duplicates_dropped"] == duplicates
    trainable, _ = select_trainable(load_table(gen), quarantined=set())
    keep = {table.ids[i] for i in trainable} - {
        json.loads(x)["id"] for x in (gen / "quarantine.jsonl").read_text().splitlines()
    }
    assert len(keep) >= 5

    # two capture jobs into one folder: one sharded and SIGTERMed, then rerun
    capture = [
        *EYAS,
        "capture",
        "--target",
        str(toy_tiny),
        "--data",
        str(gen),
        "--out",
        str(cap),
        "--backend",
        "vllm",
        "--dtype",
        "float32",
        "--shard-size",
        "1",
        "--concurrency",
        "1",
    ]
    fake_vllm = ("--capture-dir", str(tmp_path / "incoming"), "--layers", "4", "--hidden", "96")
    with (
        fake_server("eyas.testing.fake_vllm", *fake_vllm, "--service-s", "0.1") as vllm,
        fake_server("eyas.testing.fake_vllm", *fake_vllm, "--service-s", "0.1") as e_node,
    ):
        cmd = [*capture, "--url", vllm.url]
        plan = cli([*cmd[len(EYAS) :], "--dry-run"])  # the storage to provision
        assert plan.exit_code == 0, plan.output
        assert f"capture: {len(keep)} samples to go" in plan.output and "GB needed" in plan.output
        assert not (cap / "jobs").exists()
        # E's node freezes once E has committed: E is still working when its SIGTERM comes
        e = subprocess.Popen([*capture, "--url", e_node.url, "--shard", "0/2"], **quiet)
        f = subprocess.Popen(cmd, **quiet)
        wait_for_commit(cap, job_of(cap, e), e)
        e_node.freeze()
        e.send_signal(signal.SIGTERM)
        _, err = e.communicate(timeout=60)
        assert e.returncode == 143, err
        _, err = f.communicate(timeout=120)
        assert f.returncode == 0, err
        rerun = subprocess.run([*cmd, "--shard", "0/2"], **quiet, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        assert_no_process_left(run, {vllm.proc.pid, e_node.proc.pid})
    rows, _ = read_capture_index(cap)
    assert sorted(r.id for r in rows) == sorted(keep)  # each trainable sample, once
    counts, _ = capture_counts(cap)
    assert counts["samples"] == len(keep)
    status = cli(["status", str(run), "--json", str(tmp_path / "status.json")])
    assert status.exit_code == 0, status.output
    by_stage = {s["stage"]: s for s in json.loads((tmp_path / "status.json").read_text())}
    assert by_stage["capture"]["complete"] and by_stage["capture"]["num_jobs"] == 3
    assert by_stage["capture"]["duplicates"] == counts["duplicates"]

    # training reads the capture, each sample once (docs/cluster.md runs this under torchrun;
    # one process here: the ranks' split is tested in tests/train)
    train = cli(
        [
            "train",
            "--target",
            str(toy_tiny),
            "--hidden-states",
            str(cap),
            "--out",
            str(run / "drafter"),
            "--steps",
            "1",
            "--ttt",
            "1",
            "--draft-vocab",
            "400",
            "--max-len",
            "1024",
            "--batch-tokens",
            "3000",
        ]
    )
    assert train.exit_code == 0, train.output[-3000:]
    config = json.loads((run / "drafter" / "drafter" / "drafter_config.json").read_text())
    assert config["data"]["loaded"] == len(keep)
    assert_no_process_left(run, set())


def test_status_says_when_slices_cover_the_run(tmp_path):
    from eyas.store.runs import covers

    assert covers(["0/1"]) and covers(["0/2", "1/2"]) and covers(["0/2", "1/4", "3/4"])
    assert not covers(["0/2"]) and not covers(["0/2", "1/4"]) and not covers([])
    out = cli(["status", str(tmp_path)])
    assert out.exit_code == 2 and "no generate or capture folder" in out.output
    os.makedirs(tmp_path / "generate" / "jobs")
    out = cli(["status", str(tmp_path)])
    assert out.exit_code == 3 and "not complete" in out.output
