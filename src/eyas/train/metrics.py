"""`OUT/metrics.jsonl`: one row per optimizer step, one curve even across resumes."""

from __future__ import annotations

import json
import os
from pathlib import Path


def acceptance_estimate(per_step_acc: list[float]) -> float:
    """The acceptance length the TTT step accuracies imply for a chain of K drafts:
    1 + Σ_k Π_{j<=k} acc_j (the bonus token, plus draft k accepted only if 1..k all were).
    Training accuracies are measured with teacher tokens, so this is an estimate; `eyas eval`
    measures the real figure."""
    total, run = 1.0, 1.0
    for acc in per_step_acc:
        run *= acc
        total += run
    return round(total, 4)


def _step(line: str) -> int | None:
    """A row's step; None for a row a kill cut short mid-write (it is dropped, not fatal)."""
    try:
        return int(json.loads(line)["step"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def truncate_metrics(path: Path, step: int) -> int:
    """Drop rows after `step` (steps a killed run logged after its last checkpoint, which the
    resumed run logs again) and any row cut short by the kill; returns how many were dropped."""
    if not path.exists():
        return 0
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    keep = [line for line in rows if (s := _step(line)) is not None and s <= step]
    if len(keep) != len(rows):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, path)
    return len(rows) - len(keep)
