"""The draft vocabulary chosen from the data (`choose_draft_vocab`): its coverage of the
supervised tokens is reported; the default is the most frequent supervised tokens, all of them
when there are fewer than 32,000, and falls back to the full vocabulary where a reduced head
would lose tokens."""

import torch

from eyas.drafter.vocab import (
    DEFAULT_DRAFT_VOCAB,
    MIN_COVERAGE,
    choose_draft_vocab,
    coverage_at,
)

KIMI_VOCAB = 163840


def _zipf(vocab: int, exponent: float, seen: int) -> torch.Tensor:
    """Token counts falling off as rank^-exponent over the first `seen` ids (shuffled)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    ranks = torch.arange(1, seen + 1, dtype=torch.float64)
    counts[torch.randperm(vocab, generator=torch.Generator().manual_seed(0))[:seen]] = (
        1e7 * ranks**-exponent
    ).long() + 1
    return counts


def test_a_concentrated_kimi_sized_vocabulary_keeps_the_default():
    counts = _zipf(KIMI_VOCAB, 1.6, 120000)
    got = choose_draft_vocab(counts, None)
    assert got["draft_vocab_size"] == DEFAULT_DRAFT_VOCAB
    assert got["coverage"] >= MIN_COVERAGE
    assert abs(got["coverage"] - coverage_at(counts, DEFAULT_DRAFT_VOCAB)) < 1e-6
    ids = torch.arange(DEFAULT_DRAFT_VOCAB) + got["d2t"]
    assert got["t2d"][ids].all() and int(got["t2d"].sum()) == DEFAULT_DRAFT_VOCAB


def test_wide_traffic_gets_the_full_vocabulary():
    """Kimi's Chinese and tool traffic is wide: 32000 tokens would cover under 99%."""
    counts = _zipf(KIMI_VOCAB, 0.9, 150000)
    assert coverage_at(counts, DEFAULT_DRAFT_VOCAB) < MIN_COVERAGE
    got = choose_draft_vocab(counts, None)
    assert got["draft_vocab_size"] == KIMI_VOCAB and got["coverage"] == 1.0
    assert got["t2d"].all() and not got["d2t"].any()  # identity: every id drafts as itself
    assert "full vocabulary" in got["draft_vocab_choice"]


def test_a_small_target_gets_its_supervised_tokens_not_its_whole_vocabulary():
    """SmolLM2's 49,152 tokens: the head covers the 1,000 the data supervise (until 2026-12 it
    was all 49,152, which cost more per step and learned slower: docs/serving.md)."""
    counts = _zipf(49152, 1.6, 1000)
    got = choose_draft_vocab(counts, None)
    assert got["draft_vocab_size"] == 1000 and got["coverage"] == 1.0
    assert "every supervised token" in got["draft_vocab_choice"]
    kept = torch.arange(1000) + got["d2t"]
    assert bool((counts[kept] > 0).all()) and int(got["t2d"].sum()) == 1000


def test_a_target_whose_every_token_is_supervised_keeps_the_identity():
    counts = torch.arange(1, 301)
    got = choose_draft_vocab(counts, None)
    assert got["draft_vocab_size"] == 300 and got["t2d"].all() and not got["d2t"].any()


def test_an_explicit_size_is_honoured_and_its_coverage_reported():
    counts = _zipf(KIMI_VOCAB, 0.9, 150000)
    got = choose_draft_vocab(counts, 8000)
    assert got["draft_vocab_size"] == 8000
    assert abs(got["coverage"] - coverage_at(counts, 8000)) < 1e-6 and got["coverage"] < 0.99


def test_eyas_train_reports_the_coverage_of_its_draft_vocabulary(tmp_path, toy_tiny, toy_samples):
    import json

    from eyas.train.loop import run_train
    from train_helpers import toy_train_config

    lines: list[str] = []
    cfg = toy_train_config(toy_tiny, tmp_path, data=toy_samples, steps=1, draft_vocab=None)
    out = run_train(cfg, log=lines.append).drafter
    supervised = set()  # the samples' supervised (output) tokens, counted here independently
    for row in map(json.loads, toy_samples.read_text().splitlines()):
        mask = row.get("loss_mask") or [1] * len(row["output_ids"])
        supervised |= {t for t, m in zip(row["output_ids"], mask, strict=True) if m}
    n = len(supervised)
    assert n < 1024  # the toy's vocabulary: a reduced head
    said = [line for line in lines if line.startswith("draft vocabulary:")]
    assert said == [
        f"draft vocabulary: {n} of 1024 tokens, covering 100.00% of the supervised "
        "tokens (every supervised token (fewer than 32000))"
    ]
    saved = json.loads((out / "drafter_config.json").read_text())
    assert saved["draft_vocab_size"] == n
