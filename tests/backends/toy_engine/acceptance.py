"""How the toy engine counts speculative decoding (served `eyas eval`): its servers' counters,
read before and after each dataset through the client policy."""

from __future__ import annotations

from typing import Any

from eyas.backends.policy import RequestFailed, ServerPool
from eyas.errors import EyasError, RefusedError


async def _read(pool: ServerPool) -> dict[str, int]:
    """The counters summed over the pool's servers, each read through the client policy."""
    total = {"verify_steps": 0, "tokens": 0}
    for backend in pool.backends:
        try:
            snap, _ = await pool.call(lambda b: b.spec_metrics(), on=backend)
        except RequestFailed as exc:
            raise RefusedError(exc.error.reason, f"{backend.url}/counters: {exc.error}") from exc
        if not snap["present"]:
            raise EyasError("no_speculation", f"the toy server at {backend.url} has no drafter")
        for key in total:
            total[key] += snap[key]
    return total


class ToyAcceptance:
    source = "toy /counters"
    follows_settings = False  # the server's own drafting counts
    servers_may_join = False  # counter deltas, as vLLM's

    def check_config(self, cfg: Any) -> None:
        return None

    async def mark(self, pool: ServerPool) -> dict[str, int]:
        return await _read(pool)

    async def count(self, pool: ServerPool, mark: Any, answers: dict) -> dict[str, int]:
        now = await _read(pool)
        return {key: now[key] - mark[key] for key in now}

    def add(self, a: dict, b: dict) -> dict[str, int]:
        return {key: a.get(key, 0) + b.get(key, 0) for key in ("verify_steps", "tokens")}

    def figures(self, counts: dict, k: int) -> dict[str, Any]:
        steps, tokens = counts.get("verify_steps", 0), counts.get("tokens", 0)
        return {
            "verify_steps": steps,
            "acceptance_length": round(tokens / steps, 4) if steps else 0.0,
            "mean_accepted_drafts": round(tokens / steps - 1, 4) if steps else 0.0,
            "per_position": [],
            "histogram": None,
        }

    def check_run(self, total: dict) -> None:
        return None  # a server without a drafter is refused when its counters are read
