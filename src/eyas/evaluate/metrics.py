"""Acceptance metrics. Names say what they count (bug class #55):

- `acceptance_length`: tokens produced per target verify step, bonus included (SGLang's
  definition); the prefill's first token is not a verify step and is not counted.
- `mean_accepted_drafts`: accepted draft tokens per verify step (excludes the bonus).
- `per_position`: P(draft i accepted | drafts 1..i-1 accepted), i = 1..K.
- `acceptance_rate_per_position`: P(draft i accepted), i = 1..K: the share of verify steps
  whose draft i was accepted (drafts are accepted as a prefix, so this is the product of
  `per_position` up to i). vLLM logs this as its "Per-position acceptance rate"
  (`vllm/v1/spec_decode/metrics.py`, `SpecDecodingLogging.log`: accepted tokens per position
  over drafts), the figure model cards of published drafters quote.
- `histogram[a]`: number of verify steps that accepted exactly a drafts, a = 0..K.
"""

from __future__ import annotations


def acceptance_metrics(accepted: list[int], produced: list[int], k: int) -> dict:
    steps = len(accepted)
    hist = [0] * (k + 1)
    for a in accepted:
        hist[a] += 1
    reached = [sum(1 for a in accepted if a >= i - 1) for i in range(1, k + 1)]
    passed = [sum(1 for a in accepted if a >= i) for i in range(1, k + 1)]
    return {
        "verify_steps": steps,
        "acceptance_length": round(sum(produced) / steps, 4) if steps else 0.0,
        "mean_accepted_drafts": round(sum(accepted) / steps, 4) if steps else 0.0,
        "per_position": [round(p / r, 4) if r else 0.0 for p, r in zip(passed, reached)],
        "acceptance_rate_per_position": [round(p / steps, 4) if steps else 0.0 for p in passed],
        "histogram": hist,
    }
