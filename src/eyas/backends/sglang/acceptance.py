"""SGLang's acceptance, for served evaluation (`eyas.evaluate.served`): each finished
request's `meta_info` carries `spec_verify_ct` (target verify steps) and `completion_tokens`
only when it had verify steps (`eyas.backends.sglang.conventions`): a missing count is zero
steps (a one-token answer), and the run refuses only when no response carries one.

`acceptance_length` is tokens per verify step, bonus included, prefill token excluded
(`(completion_tokens - 1) / spec_verify_ct`); SGLang's own `completion_tokens /
spec_verify_ct` counts the prefill token too and is reported beside it as
`sglang_accept_length`.
"""

from __future__ import annotations

from typing import Any

from eyas.backends.sglang.conventions import VERIFY_COUNT_KEY
from eyas.errors import EyasError


def sglang_figures(verify: list[int], completion: list[int]) -> dict[str, Any]:
    steps, produced = sum(verify), sum(completion)
    return {
        "verify_steps": steps,
        "acceptance_length": round((produced - len(completion)) / steps, 4) if steps else 0.0,
        "mean_accepted_drafts": round((produced - len(completion)) / steps - 1, 4)
        if steps
        else 0.0,
        "sglang_accept_length": round(produced / steps, 4) if steps else 0.0,
        "per_position": [],
        "histogram": None,
    }


class SGLangAcceptance:
    """The registry's `acceptance` hook for SGLang (see `eyas.evaluate.served.Acceptance`):
    the counts are read from the answers, the servers are never asked."""

    source = "sglang meta_info spec_verify_ct"
    follows_settings = False  # the server's own settings count
    servers_may_join = True  # counted from the answers: a server may join mid-run (--url-file)

    def check_config(self, cfg: Any) -> None:
        return None  # the server's own settings count: eyas cannot reconfigure it

    async def mark(self, pool: Any) -> None:
        return None

    async def count(self, pool: Any, mark: Any, answers: dict) -> dict[str, Any]:
        verify, completion, carried = [], [], 0
        for gen in answers.values():
            # a response without the count had no verify step (SGLang writes it only when > 0)
            verify.append(int(gen.meta.get(VERIFY_COUNT_KEY, 0)))
            completion.append(int(gen.meta.get("completion_tokens", len(gen.output_ids))))
            carried += VERIFY_COUNT_KEY in gen.meta
        # `answered`: the prompts these figures cover (a failed request has no meta_info)
        return {
            "verify": verify,
            "completion": completion,
            "carried": carried,
            "answered": len(verify),
        }

    def add(self, a: dict, b: dict) -> dict[str, Any]:
        return {
            "verify": [*a.get("verify", []), *b.get("verify", [])],
            "completion": [*a.get("completion", []), *b.get("completion", [])],
            "carried": a.get("carried", 0) + b.get("carried", 0),
            "answered": a.get("answered", 0) + b.get("answered", 0),
        }

    def figures(self, counts: dict, k: int) -> dict[str, Any]:
        return sglang_figures(counts.get("verify", []), counts.get("completion", []))

    def check_run(self, total: dict) -> None:
        if total.get("verify") and not total.get("carried"):
            raise EyasError(
                "no_speculation",
                f"no SGLang response carries {VERIFY_COUNT_KEY}: is the server running with "
                "--speculative-algorithm EAGLE3 and the drafter?",
            )


__all__ = ["SGLangAcceptance", "sglang_figures"]
