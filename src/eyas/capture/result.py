"""The typed result of `run_capture`: this job's record (as `jobs/<job>.json` holds it), the
folder's counts and its run status, or, for `--dry-run`, what the capture would need.
`to_dict()` is the dict `run_capture` returned before it was typed, key for key and in order;
the folder's `manifest.json` is written as before.

`target` (`TargetInfo.describe()` and the config's hash), `config` (the capture config),
`servers` and `client` (`ServerPool.info`, `ServerPool.describe()`) are other modules'
records, kept as they write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from eyas.store.job_result import RunStatus, ThisRun


def _to_dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        out[f.name] = v.to_dict() if hasattr(v, "to_dict") else v
    return out


@dataclass(frozen=True)
class CaptureDryRun:
    """`--dry-run`: the samples and tokens still to capture and the storage they need."""

    dry_run: bool
    samples_to_go: int
    tokens_to_go: int
    bytes_per_token: int
    storage_needed_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclass(frozen=True)
class CaptureCounts:
    """The folder's captured samples and tokens (each id once) and its failed ids."""

    samples: int
    tokens: int
    duplicates: int
    failed: int

    def to_dict(self) -> dict[str, int]:
        return _to_dict(self)


@dataclass(frozen=True)
class CaptureResult:
    stage: str
    eyas_version: str
    input: str
    target: dict[str, Any]
    backend: str
    method: str  # the drafter method whose fused layers these are
    aux_layers: list[int]
    layers: list[int]  # the aux layers, then the final layer (HF hidden_states index)
    layer_convention: str
    dtype: str
    bytes_per_token: int
    quarantine: str | None
    excluded: dict[str, int]
    shard: str | None
    storage_needed_bytes: int
    config: dict[str, Any]
    job_id: str
    host: str
    pid: int
    pid_start: int | None  # the process's start (with the pid it names one process)
    state: str  # complete or stopped
    complete: bool
    started_unix: float
    servers: list[dict[str, Any]]
    client: dict[str, Any] | None  # None when nothing was sent
    stopped_reason: str | None
    this_run: ThisRun
    failure_reasons: dict[str, int]
    ended_unix: float
    counts: CaptureCounts
    run: RunStatus

    dry_run = False  # a class constant: `--dry-run` returns a `CaptureDryRun`

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaptureResult:
        kw = {f.name: d[f.name] for f in fields(cls)}
        kw["this_run"] = ThisRun.from_dict(d["this_run"])
        kw["counts"] = CaptureCounts(**d["counts"])
        kw["run"] = RunStatus.from_dict(d["run"])
        return cls(**kw)


__all__ = ["CaptureCounts", "CaptureDryRun", "CaptureResult"]
