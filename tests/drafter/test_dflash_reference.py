"""eyas's DFlash and DFlash2 train step for step as speculators 0.9.0's `DFlashDraftModel` and
`DFlash2DraftModel` do, from the same initial weights, rows, anchors, optimizer and learning
rate (`eyas.testing.dflash_reference`; the SmolLM2 runs are `bench/bench_dflash_reference.py`).

Tolerance: both sides compute in fp32 from identical weights, so what differs is summation
order (~1e-7 relative per step; Adam does not amplify it over a few steps). A loss matches
within 1e-4 relative at every step; per-slot correct counts may differ by one (an argmax
near-tie); the trained-slot counts and the trainable parameters are identical. A wrong
alignment (a slot's teacher one position off), a missing norm, the context seen at the
anchor, or a different weight per slot moves the loss by more than 1e-2 at the first step."""

from pathlib import Path

import pytest
import torch

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


def _context_at_the_anchor(model):
    """A wrong mask: each block also sees the target's state at its own anchor position."""
    for layer in model.layers:
        attention = layer.self_attn.forward

        def leaky(x, positions, ctx_k, ctx_v, groups=None, _attention=attention):
            if groups:
                length = ctx_k.shape[2]
                shifted = []
                for sl, mask in groups:
                    ctx = mask[..., :length]
                    ctx = ctx | torch.nn.functional.pad(ctx[..., :-1], (1, 0))
                    shifted.append((sl, torch.cat([ctx, mask[..., length:]], -1)))
                groups = shifted
            return _attention(x, positions, ctx_k, ctx_v, groups)

        layer.self_attn.forward = leaky


def _no_mask(model):
    """A wrong mask: every block sees the whole sequence's context and every other block."""
    for layer in model.layers:
        attention = layer.self_attn.forward
        layer.self_attn.forward = lambda x, p, k, v, groups=None, _a=attention: _a(
            x, p, k, v, [(sl, None) for sl, _ in groups] if groups else None
        )


def _drop(path):
    def mutate(model):
        parent, name = model.get_submodule(path.rpartition(".")[0]), path.rpartition(".")[2]
        setattr(parent, name, torch.nn.Identity())

    return mutate


def _conv_across_blocks(model):
    """The convolution's taps reach into the previous block (no position mask)."""
    for layer in model.layers:
        for conv in (layer.attention_conv, layer.mlp_conv):
            conv.block_size = 10**9


DFLASH2_MUTANTS = {
    "context_at_anchor": _context_at_the_anchor,
    "no_mask": _no_mask,
    "no_context_norm": _drop("hidden_norm"),
    "no_input_norm": _drop("layers.0.input_layernorm"),
    "no_final_norm": _drop("norm"),
    "conv_across_blocks": _conv_across_blocks,
}


def test_eyas_dflash2_trains_as_speculators_does_step_by_step(
    toy_tiny, tmp_path, speculators_python
):
    """DFlash2 (`speculators.models.dflash2`): the same losses at every step (unary KL plus
    the selector's K-way cross-entropy), the same first-step gradients tensor by tensor (the
    convolutions and the selector's codebooks included), the same teacher-forced selector
    counts. The same comparison with a defect planted in a copy of eyas's model (a wrong mask,
    a dropped norm, a convolution crossing blocks) fails it: the loss moves by more than 1e-2
    or a gradient by more than 1e-2 of its tensor's largest."""
    setup = Setup(
        target=toy_tiny,
        steps=4,
        sequences=8,
        rows=4,
        new_tokens=24,
        draft_layers=2,
        block_size=4,
        method="dflash2",
    )
    result = run(setup, tmp_path, speculators_python, mutants=DFLASH2_MUTANTS)
    assert result["trainable_equal"] and result["slot_counts_equal"]
    assert any(n.startswith("candidate_selector.") for n in result["grads"])
    assert any(".attention_conv." in n for n in result["grads"])
    assert result["max_rel_loss_diff"] < 1e-4, result["rel_loss_diff_by_step"]
    assert result["max_grad_rel_diff"] < 1e-4, result["grads"]
    for ours, theirs in zip(result["eyas"], result["speculators"]):
        assert abs(ours["correct"][0] - theirs["correct"][0]) <= 2
    assert sum(s["correct"][0] for s in result["eyas"]) > 0  # the selector learns something
    for name, planted in result["mutants"].items():
        assert planted["max_rel_loss_diff"] > 1e-2 or planted["max_grad_rel_diff"] > 1e-2, name
