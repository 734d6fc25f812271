"""The draft vocabulary chosen from the data (`choose_draft_vocab`): its coverage of the
supervised tokens is reported, and the default falls back to the full vocabulary where a
reduced head would lose tokens or save little."""

import torch

from eyas.drafter.vocab import (
    DEFAULT_DRAFT_VOCAB,
    MIN_COVERAGE,
    SMALL_TARGET_VOCAB,
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


def test_a_small_target_vocabulary_is_kept_whole():
    counts = _zipf(SMALL_TARGET_VOCAB // 2, 1.6, 1000)
    got = choose_draft_vocab(counts, None)
    assert (
        got["draft_vocab_size"] == SMALL_TARGET_VOCAB // 2 and "small" in got["draft_vocab_choice"]
    )


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
    said = [line for line in lines if line.startswith("draft vocabulary:")]
    assert said == [
        "draft vocabulary: 1024 of 1024 tokens, covering 100.00% of the supervised "
        "tokens (the target's vocabulary (1024) is small: all of it)"
    ]
    saved = json.loads((out / "drafter_config.json").read_text())
    assert saved["draft_vocab_size"] == 1024
