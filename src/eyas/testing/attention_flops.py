"""An attention kernel's FLOPs under `torch.utils.flop_counter.FlopCounterMode`, where the kernel
itself cannot run: FlexAttention's higher-order op has no eager rule for the counter (it is
counted only inside compiled graphs), and SDPA's CPU kernel is not in the counter's table.

`CountedAttention` stands in for the kernel: outputs of its shapes (attention output and
log-sum-exp), differentiable in q, k and v but computed with no matmul, while the counter is
charged the kernel's FLOPs by torch's own formulas for it (`sdpa_flop_count` in forward,
`sdpa_backward_flop_count` when its backward runs): dense, as FlopCounterMode counts
FlexAttention and SDPA on CUDA (neither discounts a causal or block-sparse mask). Every matmul
around it is counted by the counter itself.

Imports torch only: the speculators peer (`speculators_flops_peer.py`, in its own venv, which
never imports eyas) loads this file by path, so both sides count attention alike.
"""

from __future__ import annotations

import torch
from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

KEY = "attention_kernel"  # the counter's entry for these FLOPs


def _charge(counter, flops: int) -> None:
    counter.flop_counts["Global"][KEY] += flops


class CountedAttention(torch.autograd.Function):
    """(out [B, h, T, dv], lse [B, h, T]) for q [B, h, T, dq], k [B, kv, S, dq], v [B, kv, S, dv]
    (kv dividing h); the values are placeholders, the FLOPs are the kernel's."""

    @staticmethod
    def forward(ctx, counter, q, k, v):
        _charge(counter, sdpa_flop_count(q.shape, k.shape, v.shape))
        ctx.counter, ctx.shapes = counter, (q.shape, k.shape, v.shape)
        b, h, t, _ = q.shape
        kv, dv = k.shape[1], v.shape[-1]
        # a placeholder that reads q, k and v (so each gets a gradient) without a product
        mix = (k.mean((2, 3)) + v.mean((2, 3))).repeat_interleave(h // kv, 1)  # [B, h]
        out = q.mean(-1, keepdim=True).expand(b, h, t, dv) + mix[:, :, None, None]
        return out.contiguous(), q.sum(-1) * 0

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v = ctx.shapes
        _charge(ctx.counter, sdpa_backward_flop_count(grad_out.shape, q, k, v))
        zeros = [grad_out.new_zeros(s) for s in (q, k, v)]
        return None, *zeros


def counted_attention(counter):
    """`(q, k, v) -> (out, lse)` charging `counter` (a FlopCounterMode)."""

    def attend(q, k, v, *args, **kwargs):
        return CountedAttention.apply(counter, q, k, v)

    return attend
