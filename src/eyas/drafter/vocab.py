"""The draft vocabulary: the most frequent *supervised* target tokens (bug class #41).

`d2t[i] = used[i] - i` (target id = draft id + d2t[draft id]); `t2d` is a boolean mask over
the target vocabulary. When the data has fewer distinct supervised tokens than requested, the
draft vocabulary shrinks to what exists (recorded), instead of padding with ids 0, 1, 2...
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def token_counts(sequences: Iterable[tuple[list[int], list[int]]], vocab_size: int) -> torch.Tensor:
    """Counts over supervised tokens. Each item is (token ids, mask with 1 = supervised)."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for ids, mask in sequences:
        t = torch.tensor(ids, dtype=torch.long)
        m = torch.tensor(mask, dtype=torch.bool)
        counts += torch.bincount(t[m], minlength=vocab_size)[:vocab_size]
    return counts


def build_vocab_mapping(counts: torch.Tensor, draft_vocab_size: int) -> dict:
    """Returns d2t [Dv] (long), t2d [V] (bool), the kept ids and the coverage of the counts."""
    distinct = int((counts > 0).sum())
    size = min(draft_vocab_size, distinct) if distinct else draft_vocab_size
    order = torch.argsort(counts, descending=True, stable=True)[:size]
    used = torch.sort(order).values
    d2t = used - torch.arange(size)
    t2d = torch.zeros(len(counts), dtype=torch.bool)
    t2d[used] = True
    total = int(counts.sum())
    return {
        "d2t": d2t,
        "t2d": t2d,
        "draft_vocab_size": size,
        "requested_draft_vocab_size": draft_vocab_size,
        "distinct_supervised_tokens": distinct,
        "coverage": round(float(counts[used].sum()) / total, 6) if total else 0.0,
    }
