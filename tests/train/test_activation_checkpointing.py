"""Activation checkpointing recomputes the same arithmetic: the outputs and every gradient are
those of the plain forward, for EAGLE-3's TTT steps and DFlash's draft layers; `auto` turns it
on past the documented width; the device-sized --max-len default."""

from types import SimpleNamespace

import torch
from test_model_and_loss import tiny_drafter

from eyas.drafter.dflash.model import DFlashConfig, DFlashDrafter
from eyas.drafter.memory import AC_AUTO_TOKENS, activation_bytes_per_token, checkpointing_on


def _grads(model, loss_of) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    loss = loss_of()
    loss.backward()
    return loss.detach(), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


def _same(a, b) -> None:
    assert torch.allclose(a[0], b[0], rtol=1e-5, atol=1e-6)
    assert a[1].keys() == b[1].keys() and a[1]
    for name in a[1]:
        assert torch.allclose(a[1][name], b[1][name], rtol=1e-4, atol=1e-6), name


def test_eagle3_ttt_steps_checkpointed_give_the_same_loss_and_gradients():
    model = tiny_drafter(0, 50, 20).train()
    ids, aux = torch.randint(0, 50, (2, 24)), torch.randn(2, 24, 96)

    def loss_of(ac):
        return lambda: sum(
            (k + 1) * model.logits(h).logsumexp(-1).mean()
            for k, h in enumerate(model(ids, aux, 4, checkpoint_layers=ac))
        )

    _same(_grads(model, loss_of(False)), _grads(model, loss_of(True)))


def tiny_dflash() -> DFlashDrafter:
    torch.manual_seed(0)
    cfg = DFlashConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=40,
        target_hidden_size=32,
        aux_layer_ids=[1, 3],
        block_size=4,
        mask_token_id=39,
    )
    return DFlashDrafter(cfg)


def test_dflash_layers_checkpointed_give_the_same_loss_and_gradients():
    model = tiny_dflash().train()
    ids, aux = torch.randint(0, 39, (2, 20)), torch.randn(2, 20, 64)
    anchors = torch.tensor([[1, 5, 9], [0, 4, 12]])

    def loss_of(ac):
        return lambda: model(ids, aux, anchors, checkpoint_layers=ac).square().mean()

    _same(_grads(model, loss_of(False)), _grads(model, loss_of(True)))


def test_auto_turns_on_past_the_documented_width_and_saves_per_step_memory():
    cfg = SimpleNamespace(activation_checkpointing="auto")
    assert not checkpointing_on(cfg, AC_AUTO_TOKENS)
    assert checkpointing_on(cfg, AC_AUTO_TOKENS + 1)
    assert checkpointing_on(SimpleNamespace(activation_checkpointing="on"), 16)
    assert not checkpointing_on(SimpleNamespace(activation_checkpointing="off"), 10**6)
    # Kimi-K2.5 width, TTT 7, bf16: the estimate the docs quote
    off = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, False)
    on = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, True)
    assert round(off / 1e6, 2) == 3.67 and round(on / 1e6, 2) == 1.04
