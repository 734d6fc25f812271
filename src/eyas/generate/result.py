"""The typed result of `run_generate`: this job's record (as `jobs/<job>.json` holds it), the
folder's counts and its run status. `to_dict()` is the dict `run_generate` returned before it
was typed, key for key and in order; the folder's `manifest.json` is written as before.

`backend`, `render` and `sampling` are records of other modules' settings (the backend config
and its servers, `Renderer.describe()`, the sampling plans), kept as those modules write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from eyas.store.job_result import RunStatus, ThisRun


@dataclass(frozen=True)
class GenerateCounts:
    """The folder's samples (each id once), over every job."""

    conversations_done: int
    samples: int
    duplicates: int
    failed_outstanding: int

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GenerateResult:
    stage: str
    eyas_version: str
    schema_version: int
    input: str
    backend: dict[str, Any]
    render: dict[str, Any]
    sampling: dict[str, Any]
    shard: str | None
    job_id: str
    host: str
    pid: int
    pid_start: int | None  # the process's start (with the pid it names one process)
    state: str  # complete or stopped
    complete: bool  # this job ran to the end (the run: `run.complete`)
    started_unix: float
    stopped_reason: str | None  # terminated, interrupted, or why the servers failed
    this_run: ThisRun
    ended_unix: float
    counts: GenerateCounts
    run: RunStatus

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.to_dict() if hasattr(v, "to_dict") else v
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GenerateResult:
        kw = {f.name: d[f.name] for f in fields(cls)}
        kw["this_run"] = ThisRun.from_dict(d["this_run"])
        kw["counts"] = GenerateCounts(**d["counts"])
        kw["run"] = RunStatus.from_dict(d["run"])
        return cls(**kw)


__all__ = ["GenerateCounts", "GenerateResult"]
