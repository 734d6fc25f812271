"""What one EAGLE-3 training step costs at a real width, counted without a device: its FLOPs
(`FlopCounterMode`), its peak memory (`eyas.testing.peak_memory`) and its elementwise memory
traffic (`eyas.testing.traffic`), on fake tensors
(`FakeTensorMode`: shapes and dtypes, no data), with eyas's own method code.

The budget (`eyas.train.budget`) states the same FLOPs as a formula and `tests/train/
test_flops.py` holds the two equal; `bench/bench_train_flops.py` records the counts beside
speculators' and the traced peaks beside the budget's memory.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from eyas.testing.attention_flops import KEY, counted_attention
from eyas.testing.wide import eagle3_drafter, eagle3_loss, random_vocab


@contextlib.contextmanager
def _counted_kernels(counter):
    """The attention kernels of both paths charged to `counter` (`attention_flops`)."""
    import torch.nn.functional as F

    from eyas.drafter import flex

    attend = counted_attention(counter)

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        return attend(q, k, v)[0]

    saved = flex.causal_attention, F.scaled_dot_product_attention
    flex.causal_attention, F.scaled_dot_product_attention = attend, sdpa
    try:
        yield
    finally:
        flex.causal_attention, F.scaled_dot_product_attention = saved


@contextlib.contextmanager
def _figures_unread():
    """The reference loss reads its per-step figures on the host (`float`, `int`), which fake
    tensors cannot answer; for a trace they are read as 0 (the fast path reads none)."""
    from eyas.drafter.eagle3 import train

    train.float, train.int = (lambda x: 0.0), (lambda x: 0)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del train.float, train.int  # type: ignore[attr-defined]


def _unread(reference: bool):
    return _figures_unread() if reference else contextlib.nullcontext()


def _vocab(target: Path, settings: dict[str, Any]) -> dict:
    """The draft vocabulary, chosen on real tensors before the fake mode starts."""
    from eyas.hf_models import target_model

    return random_vocab(target_model(target).vocab_size, settings.pop("draft_vocab", 32000))


def _setup(target: Path, tokens: int, settings: dict[str, Any], vocab: dict):
    from eyas.hf_models import target_model

    tm = target_model(target)
    v, h = tm.vocab_size, tm.hidden_size
    embed = torch.empty(v, h, dtype=torch.bfloat16)
    head = torch.empty(v, h, dtype=torch.bfloat16)
    d = eagle3_drafter(target, vocab, embed, head, **settings)
    ids = torch.zeros(1, tokens, dtype=torch.long)
    supervised = torch.ones(1, tokens, dtype=torch.long)
    aux = torch.empty(1, tokens, d.n_aux * h, dtype=torch.bfloat16)
    final = torch.empty(1, tokens, h, dtype=torch.bfloat16)
    return d, embed, head, (ids, supervised, aux, final)


def count_flops(target: Path, tokens: int, **settings: Any) -> dict:
    """FLOPs of one forward + backward of the EAGLE-3 loss on `tokens` positions (one row),
    counted on fake tensors. `settings`: TrainConfig fields (attention, draft_head, ttt,
    activation_checkpointing, fast_path) and draft_vocab. Returns the total, the counter's
    table by op, and the trainable parameters."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    reference = settings.get("fast_path") == "off"
    settings = dict(settings)
    vocab = _vocab(target, settings)
    with FakeTensorMode(allow_non_fake_inputs=True), _unread(reference):
        d, _, head, (ids, sup, aux, final) = _setup(target, tokens, settings, vocab)
        counter = FlopCounterMode(display=False)
        with _counted_kernels(counter), counter, torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = eagle3_loss(d, ids, sup, aux, final, head)
            loss.backward()
        budget = _budget(d, head, tokens)
    by_op = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    return {
        "flops": counter.get_total_flops(),
        "by_op": by_op,
        "attention_flops": by_op.get(KEY, 0),
        "trainable_parameters": sum(p.numel() for p in d.model.parameters() if p.requires_grad),
        "tokens": tokens,
        "config": d.model.config,
        "budget_flops": budget.flops_per_step,
        "budget_gflop_per_token": budget.gflop_per_token,
    }


def count_traffic(target: Path, tokens: int, **settings: Any) -> dict:
    """The elementwise memory traffic of one forward + backward of the EAGLE-3 loss on `tokens`
    positions (one row) under bf16 autocast (CPU autocast: its casts are CUDA's for the
    matmuls, and every fp32 op here is cast explicitly), counted on fake tensors
    (`eyas.testing.traffic`). `settings` as `count_flops`'s. Returns the total, the bytes by
    region and by op, the matmul/attention operands' bytes, and the bytes in the functions
    `--fast-path compiled` compiles (`fast_path.COMPILED_FUNCTIONS`)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from eyas.drafter.fast_path import COMPILED_FUNCTIONS
    from eyas.testing.traffic import ElementwiseTraffic, TaggedGradFns

    reference = settings.get("fast_path") == "off"
    settings = dict(settings)
    vocab = _vocab(target, settings)
    with FakeTensorMode(allow_non_fake_inputs=True), _unread(reference):
        d, _, head, (ids, sup, aux, final) = _setup(target, tokens, settings, vocab)
        traffic = ElementwiseTraffic()
        with TaggedGradFns(), traffic, torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = eagle3_loss(d, ids, sup, aux, final, head)
            loss.backward()
    return {
        "bytes": traffic.total,
        "by_region": dict(traffic.by_region.most_common()),
        "by_op": dict(traffic.by_op.most_common()),
        "kernel_bytes": traffic.kernel_bytes,
        "compiled_bytes": traffic.in_functions(set(COMPILED_FUNCTIONS)),
        "tokens": tokens,
    }


def _budget(d, head, tokens: int):
    """`eyas train`'s budget for this drafter and micro-batch (`trainer_budget`)."""
    from eyas.drafter.fast_path import fast_path_on
    from eyas.drafter.memory import checkpointing_on
    from eyas.train.budget import trainer_budget

    return trainer_budget(
        d.model, head, d.n_aux, d.cfg.ttt, tokens, 1, False, "cpu",
        checkpointing=checkpointing_on(d.cfg, tokens), fast=fast_path_on(d.cfg, "cpu"),
    )  # fmt: skip


def trace_memory(target: Path, tokens: int, **settings: Any) -> dict:
    """Peak bytes of one training step as `eyas train` runs it on one GPU (bf16 autocast, fp32
    weights, AdamW with fp32 moments, foreach), traced on fake tensors after a warm-up step:
    `static` is what exists between steps (weights, optimizer moments, the drafter's frozen
    tensors in bf16 (`eyas.train.precision`), the captured target's head in bf16, the inputs),
    `peak` the most at once during the second step (forward, backward, clip, optimizer
    step)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from eyas.testing.peak_memory import PeakBytes
    from eyas.train.precision import hold_frozen

    reference = settings.get("fast_path") == "off"
    settings = dict(settings)
    vocab = _vocab(target, settings)
    with FakeTensorMode(allow_non_fake_inputs=True), _unread(reference):
        d, _, head, batch = _setup(target, tokens, settings, vocab)
        hold_frozen(d.model, torch.bfloat16)
        params = [p for p in d.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), foreach=True)

        def step() -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss, _ = eagle3_loss(d, *batch, head)
                loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 0.5)
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()  # the optimizer's moments exist from here on
        held = [*d.model.parameters(), *d.model.buffers(), head, *batch]
        held += [s for state in opt.state.values() for s in state.values()]
        static = sum(
            {t.untyped_storage()._cdata: t.untyped_storage().nbytes() for t in held}.values()
        )
        with PeakBytes(held) as trace:
            step()
    return {"static_bytes": static, "peak_bytes": static + trace.peak, "tokens": tokens}
