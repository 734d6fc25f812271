"""What a check is and what it returns (docs/audit.md).

A check declares its stable `name` (tests and gates depend on it), what it `needs` (a
tokenizer, a renderer, the source messages), and `run(ctx, dataset, idx)` yields:
- `Hit`s: one sample judged bad (or suspicious), with a severity and a stable snake_case
  reason, like datatrove's keep / drop-with-reason filters. Error hits are quarantined.
- `Systemic` findings: a whole dataset or run is wrong (a template that ignores tools,
  mismatched fingerprints, a lossy backend). Any systemic error fails the gate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

if TYPE_CHECKING:
    from eyas.audit.context import AuditContext

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Hit:
    index: int  # row of the sample table
    severity: Severity
    reason: str
    detail: str = ""  # what was found, for the report (e.g. the repeated span)


@dataclass
class Systemic:
    severity: Severity
    reason: str
    message: str
    count: int = 0
    total: int = 0
    examples: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    """One line of the report: the hits of one (check, reason, dataset), or a systemic one."""

    check: str
    severity: Severity
    reason: str
    dataset: str
    count: int
    total: int
    examples: list[str]
    message: str
    systemic: bool = False
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {
            "check": self.check,
            "severity": self.severity,
            "reason": self.reason,
            "dataset": self.dataset,
            "count": self.count,
            "total": self.total,
            "examples": self.examples,
            "message": self.message,
            "systemic": self.systemic,
        }
        if self.data:
            out["data"] = self.data
        return out


class Check:
    """Subclass, set `name`, `needs` and `reasons` (reason -> message), implement `run`."""

    name: ClassVar[str]
    # "tokenizer": decodes ids; "renderer": re-renders with the model's template;
    # "stop_ids": the target's stop tokens (tokenizer, or the stage manifest)
    needs: ClassVar[frozenset[str]] = frozenset()
    reasons: ClassVar[dict[str, str]] = {}
    # checks that decode or re-render look at an evenly spread sample of each dataset
    sampled: ClassVar[bool] = False

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterable[Hit | Systemic]:
        raise NotImplementedError


CHECKS: dict[str, Check] = {}


def register(cls: type[Check]) -> type[Check]:
    CHECKS[cls.name] = cls()
    return cls


def share_lower_bound(k: int, n: int, z: float = 1.96) -> float:
    """Wilson score lower bound of a proportion k/n (0 when k is 0)."""
    if k <= 0 or n <= 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre - spread) / (1 + z * z / n)
