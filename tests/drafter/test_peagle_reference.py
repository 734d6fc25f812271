"""eyas's P-EAGLE trains step for step as speculators 0.9.0's `PEagleDraftModel` does, from the
same initial weights, rows, COD samples, optimizer and learning rate (`eyas.testing.
peagle_reference`; the figures of a longer run are `bench/bench_peagle_reference.py`'s).

Tolerance: both sides compute in fp32 from identical weights, so what differs is summation
order (`bench/results/peagle_reference.json`: at most 5e-7 on the loss and 2.2e-5 of a
parameter's largest gradient, over 20 toy and 6 SmolLM2 steps). A loss matches within 1e-5
relative at every step and every parameter's gradient within 1e-3 of its largest entry; per-depth correct counts may differ by one (an argmax
near-tie); the trained-element counts, the trainable parameters and the COD samples
speculators' own sampler draws from eyas's seeds are identical. Each planted defect (a
parallel position blind to its chain, the final norm or `hidden_norm` dropped) moves the first
step's gradients by more than 5e-2 of their scale and its loss by more than 1e-4 (measured:
0.08 to 1, 3e-4 to 2e-2): outside the tolerance by an order of magnitude or more."""

import pytest

from eyas.testing.peagle_reference import DEFECTS, Setup, run

pytestmark = pytest.mark.slow  # speculators' venv starts in ~20 s, the toy answers 8 prompts


def test_eyas_peagle_trains_as_speculators_does_step_by_step(
    toy_tiny,
    tmp_path,
    speculators_python,
):
    setup = Setup(target=toy_tiny, steps=4, sequences=8, rows=4, new_tokens=24, max_anchors=16)
    result = run(setup, tmp_path, speculators_python, defects=tuple(DEFECTS))
    assert result["trainable_equal"] and result["depth_counts_equal"]
    assert result["cod_samples_equal"] and result["same_parameters"]
    assert len(result["eyas"]) == len(result["speculators"]) == 4
    assert all(t > 0 for t in result["eyas"][0]["total"])  # every depth trains
    assert result["max_rel_loss_diff"] < 1e-5, result["rel_loss_diff_by_step"]
    assert result["max_rel_grad_diff"] < 1e-3, result["max_rel_grad_diff"]
    assert result["max_depth_correct_diff"] <= 1
    assert result["mask_token_id"] != 0  # not the toy's zero-row pad token
    for name, planted in result["defects"].items():
        assert planted["max_rel_grad_diff"] > 5e-2, name
        assert planted["max_rel_loss_diff"] > 1e-4, name


def test_with_a_frozen_head_it_trains_as_speculators_own_default_does(
    toy_tiny,
    tmp_path,
    speculators_python,
):
    """`--eagle3.draft-head frozen`: the head keeps the target's rows, as speculators keeps it
    (`DraftVocabMixin._load_verifier_weights`): its trainer's trainable set, untouched."""
    setup = Setup(target=toy_tiny, steps=2, sequences=8, rows=4, new_tokens=24, draft_head="frozen")
    result = run(setup, tmp_path, speculators_python)
    assert result["trainable_equal"] and result["cod_samples_equal"]
    assert "lm_head.weight" not in result["trainable"]
    assert result["max_rel_loss_diff"] < 1e-5 and result["max_rel_grad_diff"] < 1e-3
