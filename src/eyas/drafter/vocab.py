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


# The default draft vocabulary (`eyas train` without --draft-vocab), chosen from the data: the
# DEFAULT_DRAFT_VOCAB most frequent supervised tokens (all of them when the data have fewer
# distinct ones), unless those would cover less than MIN_COVERAGE of the supervised tokens: a
# token outside the draft vocabulary is a certain rejection, so below 99% at least one drafted
# position in a hundred is lost before the drafter is asked; then the full vocabulary, as every
# published Kimi-K2.5 drafter keeps (TorchSpec configs).
# A small target gets the same rule. Until 2026-12 it got its whole vocabulary, decided on one
# toy run; a head over tokens the data never supervise costs more per step and learned slower
# (docs/serving.md, "The draft vocabulary": bench/results/real_quality.json).
DEFAULT_DRAFT_VOCAB = 32000
MIN_COVERAGE = 0.99


def coverage_at(counts: torch.Tensor, size: int) -> float:
    """Share of the supervised tokens the `size` most frequent ones cover."""
    total = int(counts.sum())
    if not total:
        return 0.0
    return float(torch.topk(counts, min(size, len(counts))).values.sum()) / total


def choose_draft_vocab(counts: torch.Tensor, requested: int | None) -> dict:
    """`build_vocab_mapping` at the requested size, or at the default chosen from the data
    (module constants); `why` says which and the coverage says what it costs."""
    vocab_size = len(counts)
    if requested is not None:
        size, why = requested, f"--draft-vocab {requested}"
    elif coverage_at(counts, DEFAULT_DRAFT_VOCAB) < MIN_COVERAGE:
        share = coverage_at(counts, DEFAULT_DRAFT_VOCAB)
        size = vocab_size
        why = (
            f"{DEFAULT_DRAFT_VOCAB} tokens would cover {share:.2%} of the supervised tokens "
            f"(< {MIN_COVERAGE:.0%}): the full vocabulary"
        )
    else:
        distinct = int((counts > 0).sum())
        if distinct and distinct < DEFAULT_DRAFT_VOCAB:
            size, why = distinct, f"every supervised token (fewer than {DEFAULT_DRAFT_VOCAB})"
        else:
            size = DEFAULT_DRAFT_VOCAB
            why = f"{DEFAULT_DRAFT_VOCAB} tokens cover >= {MIN_COVERAGE:.0%}"
    mapping = build_vocab_mapping(counts, size)
    if size >= vocab_size:  # the full vocabulary: every id, seen in the data or not
        mapping.update(_identity(vocab_size))
        mapping["coverage"] = 1.0 if int(counts.sum()) else 0.0
    mapping["draft_vocab_choice"] = why
    return mapping


def _identity(vocab_size: int) -> dict:
    return {
        "d2t": torch.zeros(vocab_size, dtype=torch.long),
        "t2d": torch.ones(vocab_size, dtype=torch.bool),
        "draft_vocab_size": vocab_size,
    }
