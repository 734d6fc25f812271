"""vLLM's acceptance, for served evaluation (`eyas.evaluate.served`): the spec-decode counters
every server exports on `/metrics` (`eyas.backends.vllm.conventions`), read before and after
each dataset through the pool's client policy, the differences summed.

A server that exports no spec-decode counters has no drafter: that is an error
(`no_speculation`), not acceptance 0. vLLM's acceptance is a prefix, so the per-position
counts give the exact histogram.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from eyas.backends.policy import RequestFailed, ServerPool
from eyas.errors import EyasError, RefusedError


def counter_delta(before: dict, after: dict) -> dict[str, Any]:
    """What vLLM's spec-decode counters grew by between two snapshots."""
    pos_after = after.get("accepted_per_pos") or []
    pos_before = before.get("accepted_per_pos") or [0.0] * len(pos_after)
    return {
        "num_drafts": after.get("num_drafts", 0) - before.get("num_drafts", 0),
        "num_accepted_tokens": after.get("num_accepted_tokens", 0)
        - before.get("num_accepted_tokens", 0),
        "accepted_per_pos": [a - b for a, b in zip(pos_after, pos_before)],
    }


def add_counts(a: dict, b: dict) -> dict[str, Any]:
    """Two counter deltas summed (the figures of several rounds or datasets are those of the
    summed counts, never a mean of their means)."""
    pa, pb = a.get("accepted_per_pos") or [], b.get("accepted_per_pos") or []
    width = max(len(pa), len(pb))
    pa, pb = pa + [0.0] * (width - len(pa)), pb + [0.0] * (width - len(pb))
    return {
        "num_drafts": a.get("num_drafts", 0) + b.get("num_drafts", 0),
        "num_accepted_tokens": a.get("num_accepted_tokens", 0) + b.get("num_accepted_tokens", 0),
        "accepted_per_pos": [x + y for x, y in zip(pa, pb)],
    }


def counter_figures(counts: dict, k: int) -> dict[str, Any]:
    """Acceptance figures from a counter delta."""
    drafts, accepted = counts.get("num_drafts", 0), counts.get("num_accepted_tokens", 0)
    raw = counts.get("accepted_per_pos") or []
    pos = list(raw[:k]) + [0.0] * (k - len(raw))
    reached = [drafts, *pos[:-1]]
    hist = (
        [int(drafts - pos[0])] + [int(pos[i - 1] - pos[i]) for i in range(1, k)] + [int(pos[k - 1])]
    )
    return {
        "verify_steps": int(drafts),
        "acceptance_length": round(1 + accepted / drafts, 4) if drafts else 0.0,
        "mean_accepted_drafts": round(accepted / drafts, 4) if drafts else 0.0,
        "per_position": [round(p / r, 4) if r else 0.0 for p, r in zip(pos[:k], reached[:k])],
        # vLLM's own "Per-position acceptance rate" (v1/spec_decode/metrics.py): over drafts
        "acceptance_rate_per_position": [round(p / drafts, 4) if drafts else 0.0 for p in pos],
        "histogram": hist,
    }


def served_metrics(before: dict, after: dict, k: int) -> dict[str, Any]:
    """Acceptance figures from two counter snapshots."""
    return counter_figures(counter_delta(before, after), k)


async def read_counters(pool: ServerPool) -> dict[str, Any]:
    """The spec-decode counters summed over the pool's servers, each read through the pool's
    client policy (`ServerPool.call` on that server): a server that dies between two datasets
    stops the run as one that dies mid-request does (`servers_failing`, the reason and the
    retries named), a permanent answer at once under its own reason; `no_speculation` when a
    server exports none (it runs without a drafter)."""
    total: dict[str, Any] = defaultdict(float)
    per_pos: list[float] = []
    for backend in pool.backends:
        try:
            snap, _ = await pool.call(lambda b: b.spec_metrics(), on=backend)
        except RequestFailed as exc:
            error = exc.error
            if not error.retryable:
                raise RefusedError(
                    error.reason,
                    f"reading the spec-decode counters of {backend.url}: {error.detail}",
                ) from exc
            raise RefusedError(
                "servers_failing",
                f"served evaluation stopped: reading the spec-decode counters of {backend.url} "
                f"failed after {exc.attempts} attempts (last: {error.reason}); retried: "
                f"{dict(pool.retry_reasons)}; {error.detail}",
            ) from exc
        if not snap["present"]:
            raise EyasError(
                "no_speculation",
                f"the vLLM server at {backend.url} exports no spec-decode counters: it runs "
                "without a drafter (start it with --speculative-config)",
            )
        for key, value in snap.items():
            if key == "accepted_per_pos":
                per_pos = [a + b for a, b in zip(value, per_pos)] + value[len(per_pos) :]
            elif key != "present":
                total[key] += value
    return {**total, "accepted_per_pos": per_pos}


class VLLMAcceptance:
    """The registry's `acceptance` hook for vLLM (see `eyas.evaluate.served.Acceptance`)."""

    source = "vllm /metrics counters"
    follows_settings = True  # k sizes the per-position figures and the servers eyas starts
    servers_may_join = False  # a server joining between two reads would add its whole history

    def check_config(self, cfg: Any) -> None:
        if cfg.topk > 1:
            raise EyasError(
                "bad_flag", "served vLLM evaluation runs chains (topk 1); trees: --backend local"
            )

    async def mark(self, pool: ServerPool) -> dict[str, Any]:
        return await read_counters(pool)

    async def count(self, pool: ServerPool, mark: Any, answers: dict) -> dict[str, Any]:
        return counter_delta(mark, await read_counters(pool))

    def add(self, a: dict, b: dict) -> dict[str, Any]:
        return add_counts(a, b)

    def figures(self, counts: dict, k: int) -> dict[str, Any]:
        return counter_figures(counts, k)

    def check_run(self, total: dict) -> None:
        return None  # a server without a drafter is refused when its counters are read


__all__ = [
    "VLLMAcceptance",
    "add_counts",
    "counter_delta",
    "counter_figures",
    "read_counters",
    "served_metrics",
]
