"""Job machinery shared by every stage that works through many requests (`eyas generate`,
`eyas capture`): which ids a job takes, what it counts, its progress bar, how it stops on a
signal, its error log and the folder's combined manifest. The files a job writes are the
store's (`eyas.store.runs`: job ids, job records, error logs, the run's status); this module is
how a stage runs one job over them.

    i_shard, n_shards = parse_shard(cfg.shard)
    todo = [i for i in ids if shard_of(i, n_shards) == i_shard]
    stats = Stats(total=len(todo))
    with JobProgress(len(todo), label="capture") as bar, StopSignals(pool.stop, cancel) as sig:
        ...
        bar.update(stats)
    reason = pool.stopped_reason or sig.reason  # "terminated", "interrupted" or None

**Stop signals.** SIGINT finishes the requests in flight (a second SIGINT abandons them at
once); SIGTERM (Slurm, Kubernetes) comes with a grace period before SIGKILL, so it finishes
them for at most `TERM_GRACE_S`, then abandons the rest. Either way what is done is committed
and a rerun resumes; an abandoned request is asked again by the next run. Before the requests
start (a server eyas started may still be loading), `sigterm_unwinds` turns SIGTERM into an
exception, so the way out stops that server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson

from eyas.jsonl import write_json
from eyas.records import RequestError

# -- shard assignment -----------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """`"i/n"` (checked by the configs) as (i, n)."""
    i, _, n = text.partition("/")
    return int(i), int(n)


def shard_of(sample_id: str, num_shards: int) -> int:
    """Stable across processes and machines (Python's `hash()` is salted per process):
    the first 8 bytes of sha256(id) modulo the shard count."""
    digest = hashlib.sha256(sample_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


def in_shard(sample_id: str, shard: tuple[int, int]) -> bool:
    """Whether `sample_id` falls in slice `shard` = (i, n)."""
    i, n = shard
    return n <= 1 or shard_of(sample_id, n) == i


# -- counts and progress --------------------------------------------------------------------------


@dataclass
class Stats:
    """One job's counters: its record's `this_run` (`eyas.store.job_result.JobStats`)."""

    total: int = 0
    done: int = 0
    samples: int = 0
    failed: int = 0
    retries: int = 0
    skipped_elsewhere: int = 0
    output_tokens: int = 0
    reasons: Counter = field(default_factory=Counter)
    retry_reasons: Counter = field(default_factory=Counter)
    finish_reasons: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)

    def as_dict(self) -> dict:
        elapsed = time.perf_counter() - self.started
        return {
            "jobs": self.total,
            "jobs_done": self.done,
            "samples_written": self.samples,
            "failed": self.failed,
            "retries": self.retries,
            "skipped_done_elsewhere": self.skipped_elsewhere,
            "output_tokens": self.output_tokens,
            "failure_reasons": dict(self.reasons),
            "retry_reasons": dict(self.retry_reasons),
            "finish_reasons": dict(self.finish_reasons),
            "seconds": round(elapsed, 3),
        }


class JobProgress:
    """A progress bar of a job (samples/s, tokens/s, ETA, retries, failures), on stderr;
    throttled to ~10 updates/s so it never costs the client real CPU."""

    def __init__(self, total: int, label: str, enabled: bool = True, console: Any = None):
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self._last = 0.0
        self._start = time.perf_counter()
        self.progress = Progress(
            TextColumn(f"[bold]{label}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[extra]}"),
            console=console or Console(stderr=True),
            disable=not enabled,
        )
        self.task = self.progress.add_task(label, total=total, rate="", extra="")

    def __enter__(self) -> JobProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def update(self, stats: Stats, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        elapsed = max(1e-9, now - self._start)
        self.progress.update(
            self.task,
            completed=stats.done,
            rate=f"{stats.done / elapsed:,.1f} samples/s  {stats.output_tokens / elapsed:,.0f} tok/s",
            extra=f"retries {stats.retries}  failed {stats.failed}",
        )


# -- stop signals ---------------------------------------------------------------------------------

# SIGTERM's grace period before SIGKILL is 30 s by default in Slurm and Kubernetes: finish what
# is in flight for at most this long, then commit and exit.
TERM_GRACE_S = 15.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _main_thread() -> bool:
    # a signal handler can only be set from the main thread (a stage run from a worker thread,
    # as some tests do, runs without one)
    return threading.current_thread() is threading.main_thread()


class StopSignals:
    """While a job's requests run (inside a running event loop): SIGINT and SIGTERM set `stop`
    (dispatch ends, the requests in flight finish); SIGTERM calls `cancel` after `grace_s`, a
    second signal at once. `reason` is "terminated" or "interrupted" once one came. On exit the
    handlers are removed and SIGTERM is ignored: what is done is committed, and the job's last
    record and the server's stop are short, so they are let finish."""

    def __init__(
        self, stop: asyncio.Event, cancel: Callable[[], None], grace_s: float = TERM_GRACE_S
    ):
        self.stop = stop
        self.cancel = cancel
        self.grace_s = grace_s
        self.reason: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def on_signal(self, sig: signal.Signals) -> None:
        first = self.reason is None
        if first:
            self.reason = "terminated" if sig == signal.SIGTERM else "interrupted"
        self.stop.set()
        if not first:
            self.cancel()
        elif sig == signal.SIGTERM:
            loop = self._loop or asyncio.get_running_loop()
            loop.call_later(self.grace_s, self.cancel)

    def __enter__(self) -> StopSignals:
        self._loop = asyncio.get_running_loop()
        if _main_thread():
            for sig in _SIGNALS:
                self._loop.add_signal_handler(sig, self.on_signal, sig)
        return self

    def __exit__(self, *exc: Any) -> None:
        if _main_thread() and self._loop is not None:
            for sig in _SIGNALS:
                self._loop.remove_signal_handler(sig)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Terminated(Exception):
    """SIGTERM before the requests started (`sigterm_unwinds`)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_restored() -> Iterator[None]:
    """The SIGTERM handler as it was before, restored on exit (`StopSignals` leaves SIGTERM
    ignored while a job's last record is written)."""
    if not _main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises `Terminated` until `StopSignals` takes over (a server eyas started may
    still be loading: unwinding stops it on the way out); the handler before is restored on
    exit."""
    with sigterm_restored():
        if _main_thread():
            signal.signal(signal.SIGTERM, _raise_terminated)
        yield


# -- the job's error log and the folder's manifest ------------------------------------------------


class ErrorLog:
    """A job's request errors, one JSON line each, flushed as they come (its
    `jobs/<job>.errors.jsonl`, `eyas.store.runs.job_errors_path`), counted by reason. A
    request that failed is also counted in `stats.failed` by its stage; an error that still
    kept a sample (a multi-turn conversation stopped early) is not."""

    def __init__(self, file: IO[bytes], stats: Stats):
        self.file = file
        self.stats = stats

    def add(self, error: RequestError) -> None:
        self.file.write(orjson.dumps(error.to_dict()) + b"\n")
        self.file.flush()
        self.stats.reasons[error.reason] += 1


# the job record's keys that describe one job, not the folder
_JOB_ONLY = ("job_id", "host", "pid", "state", "started_unix", "ended_unix")


def write_combined_manifest(
    stage_dir: Path, record: dict[str, Any], status: dict[str, Any], counts: dict[str, Any]
) -> dict[str, Any]:
    """The folder's `manifest.json`: this job's record (its settings are the latest) with the
    whole folder's status and counts (a snapshot; `eyas status` recomputes it)."""
    combined = {**record, **status, "counts": counts, "job": record["job_id"]}
    for key in _JOB_ONLY:
        combined.pop(key, None)
    write_json(stage_dir / "manifest.json", combined)
    return combined


__all__ = [
    "TERM_GRACE_S",
    "ErrorLog",
    "JobProgress",
    "Stats",
    "StopSignals",
    "Terminated",
    "in_shard",
    "parse_shard",
    "shard_of",
    "sigterm_restored",
    "sigterm_unwinds",
    "write_combined_manifest",
]
