"""`OUT/metrics.jsonl`: one row per optimizer step, one curve even across resumes; the same
rows go to the curve loggers (`eyas.train.loggers`: TensorBoard when installed, W&B, MLflow)."""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eyas.train.config import TrainConfig


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


class MetricsWriter:
    """Rank 0 appends each step's row to `OUT/metrics.jsonl` and hands it to the curve loggers
    (a logger asked for whose package is missing fails here, before the first step); other
    ranks write nothing."""

    def __init__(self, cfg: TrainConfig, first_step: int, rank: int = 0):
        from eyas.train.loggers import open_loggers

        self.cfg, self.active = cfg, rank == 0
        self.path = cfg.out / "metrics.jsonl"
        self.last_elapsed = 0.0
        self.loggers = []
        if self.active:
            config = json.loads(cfg.model_dump_json())
            self.loggers = open_loggers(cfg.log_to, cfg.out, first_step + 1, config)
            atexit.register(self.close)  # a killed or failed run still flushes what it logged

    def write(self, row: dict) -> None:
        if not self.active:
            return
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.loggers:
            from eyas.train.loggers import curves

            scalars = curves(row, row["elapsed_s"] - self.last_elapsed)
            for logger in self.loggers:
                logger.log(row["step"], scalars)
        self.last_elapsed = row["elapsed_s"]
        if row["step"] >= self.cfg.steps:
            self.close()

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()
        self.loggers = []
