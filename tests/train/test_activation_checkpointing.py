"""Activation checkpointing recomputes the same arithmetic: the outputs and every gradient are
those of the plain forward, for EAGLE-3's TTT steps and DFlash's draft layers; `auto` turns it
on past its threshold, counted in a micro-batch's tokens; the device-sized --max-len default."""

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


def test_auto_turns_on_past_its_threshold_and_saves_per_step_memory():
    cfg = SimpleNamespace(activation_checkpointing="auto")
    assert not checkpointing_on(cfg, AC_AUTO_TOKENS)
    assert checkpointing_on(cfg, AC_AUTO_TOKENS + 1)
    # the run's threshold where one is set (given, or resolved from the GPU's memory)
    wide = SimpleNamespace(activation_checkpointing="auto", activation_checkpointing_above=20480)
    assert not checkpointing_on(wide, 16384) and checkpointing_on(wide, 20481)
    assert checkpointing_on(SimpleNamespace(activation_checkpointing="on"), 16)
    assert not checkpointing_on(SimpleNamespace(activation_checkpointing="off"), 10**6)
    # Kimi-K2.5 width, TTT 7, bf16: the estimate the docs quote
    off = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, False)
    on = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, True)
    assert round(off / 1e6, 2) == 3.67 and round(on / 1e6, 2) == 1.04


def test_auto_counts_a_micro_batchs_tokens_rows_times_width(monkeypatch):
    """Activations grow with every token of a micro-batch, so `auto` compares rows x width
    (padding included) with its threshold, not the width alone: two rows of 10 tokens are
    over a threshold of 16, one row of 16 is not."""
    from eyas.drafter.eagle3 import model as eagle3_model
    from eyas.drafter.loss import Teacher
    from eyas.drafter.registry import get_method

    calls = []
    real = eagle3_model.checkpoint
    monkeypatch.setattr(
        eagle3_model, "checkpoint", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    model = tiny_drafter().train()
    model.t2d.fill_(True)

    def checkpointed(rows: int, width: int) -> bool:
        calls.clear()
        cfg = SimpleNamespace(
            ttt=2, fast_path="off", activation_checkpointing="auto",
            activation_checkpointing_above=16, loss_decay=0.8, chunk_len=64,
        )  # fmt: skip
        prep = SimpleNamespace(
            input_ids=torch.randint(0, 40, (rows, width)),
            supervised=torch.ones(rows, width, dtype=torch.bool),
        )
        teacher = Teacher(torch.randn(rows, width, 32), torch.randn(40, 32))
        loss, _ = get_method("eagle3").loss(
            model, model, prep, aux=torch.randn(rows, width, 96), teacher=teacher,
            normalizer=[10.0, 10.0], train_cfg=cfg,
        )  # fmt: skip
        loss.backward()
        return bool(calls)

    assert not checkpointed(1, 16)
    assert checkpointed(2, 10)
    assert not checkpointed(2, 8)
