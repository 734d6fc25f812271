"""Typed training results: each optimizer step's figures (`StepMetrics`, a row of
`OUT/metrics.jsonl`: `to_dict()` writes the row as before) and what `run_train` returns
(`TrainResult`: the drafter's directory and the steps this run trained)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    lr: float
    grad_norm: float
    per_step_loss: list[float]  # per TTT step (drafted position)
    per_step_acc: list[float]
    draft_vocab_coverage: float  # share of trained positions whose target is in the draft vocab
    trained_positions: int
    elapsed_s: float  # since this run's first step
    acceptance_estimate: float  # the acceptance length the TTT accuracies imply
    checkpoint: bool = False  # a checkpoint was written after this step

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "checkpoint"}
        if self.checkpoint:  # the row names it only when true
            out["checkpoint"] = True
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StepMetrics:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name != "checkpoint"}
        return cls(**kw, checkpoint=bool(d.get("checkpoint", False)))


@dataclass(frozen=True)
class TrainResult:
    drafter: Path  # the final drafter (`OUT/drafter`), what export and eval read
    steps: int  # the step the drafter was saved at (a resumed run counts earlier steps too)
    history: list[StepMetrics]  # this run's steps (a resumed run: from where it resumed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "drafter": str(self.drafter),
            "steps": self.steps,
            "history": [m.to_dict() for m in self.history],
        }


__all__ = ["StepMetrics", "TrainResult"]
