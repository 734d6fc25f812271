"""Typed views of what a job of a shared stage folder reports (`eyas.store.runs`): the run
status over every job (`run_status`), and one job's own counters (`this_run`). Generate and
capture return them inside their results (`eyas.generate.result`, `eyas.capture.result`);
`to_dict()` writes the dicts `run_status` and the job records hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


def _kwargs(cls: type, d: Mapping[str, Any]) -> dict[str, Any]:
    return {f.name: d[f.name] for f in fields(cls)}


@dataclass(frozen=True)
class JobSummary:
    """One job of the folder as `run_status` lists it (a record may lack a field: None)."""

    job_id: str | None
    host: str | None
    pid: int | None
    shard: str | None
    state: str | None  # running, complete, stopped, died, unfinished
    stopped_reason: str | None
    started_unix: float | None
    ended_unix: float | None
    committed: int | None  # samples this job wrote

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSummary:
        return cls(**_kwargs(cls, d))


@dataclass(frozen=True)
class RunStatus:
    """The folder's run: its jobs, whether the complete ones cover the input, the counts."""

    complete: bool
    jobs: list[JobSummary]
    num_jobs: int
    samples: int
    duplicates: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "complete": self.complete,
            "jobs": [j.to_dict() for j in self.jobs],
            "num_jobs": self.num_jobs,
            "samples": self.samples,
            "duplicates": self.duplicates,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunStatus:
        kw = _kwargs(cls, d)
        kw["jobs"] = [JobSummary.from_dict(j) for j in d["jobs"]]
        return cls(**kw)


@dataclass(frozen=True)
class JobStats:
    """One job's client counters (`eyas.generate.engine.Stats.as_dict`)."""

    jobs: int
    jobs_done: int
    samples_written: int
    failed: int
    retries: int
    skipped_done_elsewhere: int
    output_tokens: int
    failure_reasons: dict[str, int]
    retry_reasons: dict[str, int]
    finish_reasons: dict[str, int]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobStats:
        return cls(**_kwargs(cls, d))


@dataclass(frozen=True)
class ThisRun:
    """This job's counters (`stats`; None when it sent nothing: every sample was done, or it
    was terminated first) and the rows it skipped, per reason."""

    stats: JobStats | None
    skipped: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {**(self.stats.to_dict() if self.stats else {}), "skipped": dict(self.skipped)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ThisRun:
        stats = JobStats.from_dict(d) if "samples_written" in d else None
        return cls(stats, dict(d.get("skipped") or {}))

    @property
    def samples_written(self) -> int:
        return self.stats.samples_written if self.stats else 0

    @property
    def failed(self) -> int:
        return self.stats.failed if self.stats else 0

    @property
    def output_tokens(self) -> int:
        return self.stats.output_tokens if self.stats else 0

    @property
    def retries(self) -> int:
        return self.stats.retries if self.stats else 0

    @property
    def failure_reasons(self) -> dict[str, int]:
        return self.stats.failure_reasons if self.stats else {}

    @property
    def retry_reasons(self) -> dict[str, int]:
        return self.stats.retry_reasons if self.stats else {}


__all__ = ["JobStats", "JobSummary", "RunStatus", "ThisRun"]
