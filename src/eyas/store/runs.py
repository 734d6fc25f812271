"""A stage folder that many jobs write at once (generate and capture, on any machines that share
the storage; docs/cluster.md).

Every job (one process start) has an id of its own, `<host>-<pid>-<random>`, and writes only
files carrying it: its shards `part-<job>-NNNNN.*`, its record `jobs/<job>.json` (written when
it starts, rewritten when it ends) and its error log `jobs/<job>.errors.jsonl`. No job replaces
or deletes another's file, except the temporary file of a job on this host whose process is
gone. Readers take the union of every job's shards (an id committed twice by two racing jobs:
the first in part-name order wins, the rest are counted as duplicates), and `run_status`
combines the job records: which jobs wrote the folder, whether each finished, and whether the
finished ones cover every slice of the input (`--shard i/n`, any mix of n).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import socket
import time
from pathlib import Path
from typing import Any

import orjson

from eyas.jsonl import read_json_object, write_json

JOBS = "jobs"
_PART = re.compile(r"^\.?part-(?P<job>.+)-(?P<n>\d{5})(\.tmp|\.parquet|\.safetensors)$")


def new_job_id() -> str:
    """Unique per process start: a restarted job (same host, maybe the same pid) gets a new one."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname() or "host")
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


def job_record_path(stage_dir: str | Path, job_id: str) -> Path:
    return Path(stage_dir) / JOBS / f"{job_id}.json"


def job_errors_path(stage_dir: str | Path, job_id: str) -> Path:
    return Path(stage_dir) / JOBS / f"{job_id}.errors.jsonl"


def _host_pid(job_id: str) -> tuple[str, int] | None:
    host, _, rest = job_id.rpartition("-")[0].rpartition("-")
    return (host, int(rest)) if host and rest.isdigit() else None


def _alive_here(job_id: str) -> bool | None:
    """True/False for a job of this host; None when it ran elsewhere (cannot tell)."""
    hp = _host_pid(job_id)
    this = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname() or "host")
    if hp is None or hp[0] != this:
        return None
    try:
        os.kill(hp[1], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, Linux `/proc/<pid>/stat` field 22),
    or None where that cannot be read: with the pid it names one process, even after the pid
    is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def clean_stale_tmps(stage_dir: str | Path) -> int:
    """Delete the temporary shards of dead jobs of this host (and of the old unnamed writer);
    a live job's, or another host's, are left alone."""
    removed = 0
    for tmp in Path(stage_dir).glob(".part-*.tmp"):
        m = _PART.match(tmp.name)
        if m is None or _alive_here(m["job"]) is False:
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def start_job(stage_dir: str | Path, job_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """Write this job's record (state `running`) before it commits anything."""
    rec = {
        **record,
        "job_id": job_id,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": process_start(os.getpid()),
        "state": "running",
        "complete": False,
        "started_unix": time.time(),
    }
    write_json(job_record_path(stage_dir, job_id), rec)
    return rec


def end_job(stage_dir: str | Path, record: dict[str, Any]) -> dict[str, Any]:
    """Rewrite this job's record when it ends: `complete`, or `stopped` with its reason."""
    rec = {**record, "ended_unix": time.time()}
    rec["state"] = "complete" if rec.get("complete") else "stopped"
    write_json(job_record_path(stage_dir, rec["job_id"]), rec)
    return rec


def job_records(stage_dir: str | Path) -> list[dict[str, Any]]:
    """Every job's record, oldest first; a `running` job whose process is gone on this host is
    `died` (SIGKILL, a node lost), one of another host that never ended is `unfinished`."""
    records = []
    for path in sorted((Path(stage_dir) / JOBS).glob("*.json")):
        rec = read_json_object(path)
        if rec.get("state") == "running":
            alive = _alive_here(str(rec.get("job_id", "")))
            if alive and rec.get("pid_start") is not None:
                # the pid may have been reused since the job died: same pid, another start
                alive = process_start(int(rec.get("pid", -1))) == rec["pid_start"]
            rec["state"] = {True: "running", False: "died", None: "unfinished"}[alive]
        records.append(rec)
    return sorted(records, key=lambda r: r.get("started_unix", 0))


def covers(shards: list[str]) -> bool:
    """Whether jobs with these `i/n` slices, together, cover every id (any mix of n)."""
    parsed = {tuple(map(int, s.split("/"))) for s in shards}
    if not parsed:
        return False
    period = math.lcm(*(n for _, n in parsed))
    if period > 1_000_000:  # not a real layout; only equal n can be checked
        return any(all((i, n) in parsed for i in range(n)) for _, n in parsed)
    return all(any(r % n == i for i, n in parsed) for r in range(period))


def part_job(name: str) -> str | None:
    """The job id in a part name (None for the old `part-NNNNN` names)."""
    m = _PART.match(name)
    return m["job"] if m and not m["job"].isdigit() else None


def combined_errors(stage_dir: str | Path, committed_by: dict[str | None, set[str]]) -> list[dict]:
    """Every job's recorded failures, the latest per id, minus those a later job committed
    (`committed_by`: job id -> ids in its parts). An id can be both committed and failed by
    one job (a conversation cut at a later turn keeps its earlier turns): that stays."""
    latest: dict[str, tuple[int, dict]] = {}
    records = job_records(stage_dir)
    for k, rec in enumerate(records):
        path = job_errors_path(stage_dir, rec["job_id"])
        if not path.exists():
            continue
        for line in path.read_bytes().splitlines():
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the torn last line of a killed job
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                latest[row["id"]] = (k, row)
    later = [committed_by.get(rec["job_id"], set()) for rec in records]
    return [
        row for sid, (k, row) in latest.items() if not any(sid in ids for ids in later[k + 1 :])
    ]


def write_combined_errors(
    stage_dir: str | Path, committed_by: dict[str | None, set[str]]
) -> list[dict]:
    """`errors.jsonl`: the run's outstanding failures (a snapshot; each job's log is its own)."""
    rows = combined_errors(stage_dir, committed_by)
    path = Path(stage_dir) / "errors.jsonl"
    tmp = path.with_name(f".errors.jsonl.{os.getpid()}-{secrets.token_hex(3)}.tmp")
    tmp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    tmp.replace(path)
    return rows


def run_status(stage_dir: str | Path, samples: int, duplicates: int) -> dict[str, Any]:
    """The run-level view: its jobs, whether the complete ones cover the input, the counts."""
    records = job_records(stage_dir)
    complete_slices = [r.get("shard") or "0/1" for r in records if r.get("state") == "complete"]
    return {
        "complete": covers(complete_slices),
        "jobs": [
            {
                k: r.get(k)
                for k in (
                    "job_id",
                    "host",
                    "pid",
                    "shard",
                    "state",
                    "stopped_reason",
                    "started_unix",
                    "ended_unix",
                )
            }
            | {"committed": (r.get("this_run") or {}).get("samples_written")}
            for r in records
        ],
        "num_jobs": len(records),
        "samples": samples,
        "duplicates": duplicates,
    }


def stage_manifest(stage_dir: str | Path) -> dict[str, Any]:
    """`manifest.json` (the latest combined snapshot), else the newest job record (every job
    of the folder was killed before one ended), else {}."""
    stage_dir = Path(stage_dir)
    if (stage_dir / "manifest.json").exists():
        return read_json_object(stage_dir / "manifest.json")
    records = job_records(stage_dir)
    return records[-1] if records else {}
