"""`eyas status RUN`: the jobs that wrote a run's stage folders and whether the run is complete
(recomputed from the folder itself, never from a snapshot one job wrote)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eyas.errors import EyasError
from eyas.store.captures import capture_counts, capture_shards
from eyas.store.runs import JOBS, combined_errors, run_status, stage_manifest
from eyas.store.shards import ids_by_job, shard_paths

STAGES = ("generate", "capture")


def stage_dirs(path: str | Path) -> dict[str, Path]:
    """The stage folders under a run folder, or the one stage folder given."""
    path = Path(path)
    if not path.is_dir():
        raise EyasError("no_input", f"{path} is not a folder")
    own = (path / JOBS).is_dir() or shard_paths(path) or capture_shards(path)
    if own:
        return {"capture" if capture_shards(path) else "generate": path}
    found = {s: path / s for s in STAGES if (path / s).is_dir()}
    if not found:
        raise EyasError("no_input", f"{path} holds no generate or capture folder of eyas")
    return found


def stage_status(stage: str, path: Path) -> dict[str, Any]:
    stage_manifest(path)  # the readers read it: a malformed one is an error here too
    if stage == "capture":
        counts, by_job = capture_counts(path)
    else:
        by_job, rows = ids_by_job(path)
        samples = len(set().union(*by_job.values())) if by_job else 0
        counts = {"samples": samples, "duplicates": rows - samples}
    status = run_status(path, counts["samples"], counts["duplicates"])
    status["failed_outstanding"] = len(combined_errors(path, by_job))
    status["temporary_files"] = len(list(path.glob(".part-*.tmp")))
    return {"stage": stage, "path": str(path), **status, "counts": counts}


def status(path: str | Path) -> list[dict[str, Any]]:
    return [stage_status(stage, p) for stage, p in stage_dirs(path).items()]
