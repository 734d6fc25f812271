"""The shared stage folder's rules, in process: writers that never collide, a dead job's
temporary shard removed and a live one's kept, duplicates read once and counted, failures
cleared only by a later job's commit."""

from __future__ import annotations

import subprocess
import sys

import orjson

from eyas.jsonl import write_json
from eyas.records import Sample
from eyas.store import ShardWriter, load_table
from eyas.store.runs import (
    combined_errors,
    end_job,
    job_errors_path,
    job_record_path,
    job_records,
    new_job_id,
    process_start,
    start_job,
)
from eyas.store.shards import id_index, ids_by_job


def sample(i: str) -> Sample:
    return Sample(id=i, dataset="d", prompt_ids=[1, 2], output_ids=[3], finish_reason="stop")


def test_two_writers_starting_together_never_replace_each_other(tmp_path):
    a, b = ShardWriter(tmp_path, 2), ShardWriter(tmp_path, 2)
    for k in range(4):
        a.add(sample(f"a{k}"))
        b.add(sample(f"b{k}"))
    a.add(sample("x"))
    b.add(sample("x"))  # both jobs did x: a race between unsharded jobs
    a.flush()
    b.flush()
    assert a.job_id != b.job_id and len(list(tmp_path.glob("part-*.parquet"))) == 6
    table = load_table(tmp_path)
    assert sorted(table.ids) == sorted(
        [*(f"a{k}" for k in range(4)), *(f"b{k}" for k in range(4)), "x"]
    )
    assert table.duplicates == 1 and id_index(tmp_path)[1] == 1


def test_only_a_dead_local_jobs_temporary_shard_is_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "from eyas.store.runs import new_job_id; print(new_job_id())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    live = new_job_id()
    other_host = "elsewhere-123-abcdef"
    for job in (dead, live, other_host):
        (tmp_path / f".part-{job}-00000.tmp").write_bytes(b"half")
    ShardWriter(tmp_path, 2)
    left = sorted(p.name for p in tmp_path.glob(".part-*.tmp"))
    assert left == sorted([f".part-{live}-00000.tmp", f".part-{other_host}-00000.tmp"])


def test_a_failure_is_cleared_only_by_a_later_jobs_commit(tmp_path):
    first, second = "h-1-aaaaaa", "h-2-bbbbbb"
    for k, job in enumerate((first, second)):
        rec = start_job(tmp_path, job, {"shard": "0/1"})
        rec["started_unix"] = k  # order them
        end_job(tmp_path, {**rec, "complete": True})
    job_errors_path(tmp_path, first).write_bytes(
        b"".join(orjson.dumps({"id": i, "reason": "r"}) + b"\n" for i in ("p", "q", "s"))
    )
    # p: committed by the same job (a conversation cut at a later turn): stays;
    # q: retried and committed by the later job: cleared; s: never committed: stays
    assert [r["job_id"] for r in job_records(tmp_path)] == [first, second]
    left = combined_errors(tmp_path, {first: {"p"}, second: {"q"}})
    assert sorted(r["id"] for r in left) == ["p", "s"]


def test_ids_by_job_names_the_writer(tmp_path):
    w = ShardWriter(tmp_path, 1)
    w.add(sample("z"))
    by_job, rows = ids_by_job(tmp_path)
    assert by_job == {w.job_id: {"z"}} and rows == 1


def test_a_dead_job_whose_pid_was_reused_is_not_running(tmp_path):
    """A job record names its process by pid and start time: a live process that took the dead
    job's pid (pids are reused) does not make the job look alive."""
    import os

    me = os.getpid()
    assert process_start(me) is not None  # Linux: /proc/<pid>/stat
    rec = start_job(tmp_path, new_job_id(), {"shard": "0/1"})
    assert rec["pid"] == me and rec["pid_start"] == process_start(me)
    assert [r["state"] for r in job_records(tmp_path)] == ["running"]
    rec["pid_start"] -= 1  # as if an earlier process with this pid had written it
    write_json(job_record_path(tmp_path, rec["job_id"]), rec)
    assert [r["state"] for r in job_records(tmp_path)] == ["died"]
