"""eyas's DFlash trains step for step as speculators 0.9.0's `DFlashDraftModel` does, from the
same initial weights, rows, anchors, optimizer and learning rate (`eyas.testing.
dflash_reference`; the SmolLM2 run is `bench/bench_dflash_reference.py`).

Tolerance: both sides compute in fp32 from identical weights, so what differs is summation
order (~1e-7 relative per step; Adam does not amplify it over a few steps). A loss matches
within 1e-4 relative at every step; per-slot correct counts may differ by one (an argmax
near-tie); the trained-slot counts and the trainable parameters are identical. A wrong
alignment (a slot's teacher one position off), a missing norm, the context seen at the
anchor, or a different weight per slot moves the loss by more than 1e-2 at the first step."""

from pathlib import Path

import pytest

from eyas.testing.dflash_reference import Setup, run

pytestmark = pytest.mark.slow  # speculators' venv starts in ~20 s, the toy answers 8 prompts

ROOT = Path(__file__).resolve().parents[2]


def test_eyas_dflash_trains_as_speculators_does_step_by_step(
    toy_tiny, tmp_path, speculators_python
):
    setup = Setup(
        target=toy_tiny, steps=6, sequences=8, rows=4, new_tokens=24, draft_layers=2, block_size=4
    )
    result = run(setup, tmp_path, speculators_python)
    assert result["trainable_equal"] and result["slot_counts_equal"]
    assert len(result["eyas"]) == len(result["speculators"]) == 6
    assert sum(sum(s["total"]) for s in result["eyas"]) > 0
    assert result["max_rel_loss_diff"] < 1e-4, result["rel_loss_diff_by_step"]
    for ours, theirs in zip(result["eyas"], result["speculators"]):
        assert all(abs(a - b) <= 1 for a, b in zip(ours["correct"], theirs["correct"]))
    # the mask token is not the toy's zero-row pad token (0)
    assert result["mask_token_id"] != 0
