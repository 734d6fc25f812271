"""Causal attention that also returns its log-sum-exp, differentiably, through FlexAttention
(`torch.nn.attention.flex_attention`): the kernel the fast TTT path (`eagle3.model.
ttt_attention_fast`) merges its diagonal steps into.

- GQA without copies: `enable_gqa` lets the kernel read each key/value head for its group of
  query heads, where SDPA's path repeats them to every head.
- Values of another width than the keys (MLA: v 128, q/k 192) run as they are: no padding.
- The log-sum-exp is differentiable: the diagonal merge multiplies the causal output by a
  weight that depends on it, and FlexAttention's backward folds that gradient into its delta
  (`torch/_inductor/kernel/flex/flex_attention.py`, `grad_logsumexp`; the Triton backend,
  FlexAttention's default).

On CUDA the kernel is compiled (`torch.compile(flex_attention)`): a fused, block-sparse,
memory-linear kernel. Elsewhere FlexAttention's public entry point refuses a backward on CPU,
so the CPU (the tests' device) calls the same higher-order op it dispatches to, whose eager
implementation is the dense reference the compiled kernel is tested against in PyTorch; the
two entry points are pinned equal in `tests/drafter/test_fast_path.py`.
"""

from __future__ import annotations

import functools
import math

import torch

BLOCK = 128  # FlexAttention's default sparse block


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def causal_block_mask(t: int, device: torch.device):
    """The causal `BlockMask` of a [t, t] attention, built from its block structure (query
    block i: kv blocks 0..i-1 full, block i partial) instead of evaluating the mask over t x t
    positions as `create_block_mask` does eagerly."""
    from torch.nn.attention.flex_attention import BlockMask

    n = -(-t // BLOCK)
    rows = torch.arange(n, device=device, dtype=torch.int32)
    partial_num = torch.ones(1, 1, n, device=device, dtype=torch.int32)
    partial_idx = rows.view(1, 1, n, 1).expand(1, 1, n, n).contiguous()
    full_num = rows.view(1, 1, n).clone()
    full_idx = rows.view(1, 1, 1, n).expand(1, 1, n, n).contiguous()
    return BlockMask.from_kv_blocks(
        partial_num,
        partial_idx,
        full_num,
        full_idx,
        BLOCK_SIZE=BLOCK,
        mask_mod=_causal,
        seq_lengths=(t, t),
    )


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention)


def _cuda_flex(q, k, v, mask, scale, gqa):
    """The public API, compiled; the log-sum-exp in natural-log units."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # torch < 2.9: the older keyword
        return _compiled_flex()(
            q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa, return_lse=True
        )
    out, aux = _compiled_flex()(
        q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa, return_aux=AuxRequest(lse=True)
    )
    return out, aux.lse


def _eager_flex(q, k, v, mask, scale):
    """FlexAttention's higher-order op, eagerly (its dense implementation, with backward):
    what `flex_attention` dispatches to, less the device check that refuses a CPU backward.
    The op keeps its log-sum-exp in log2 units (the public API rescales it the same way)."""
    from torch._higher_order_ops.flex_attention import flex_attention as flex_hop
    from torch.nn.attention.flex_attention import _apply_kernel_options

    options = _apply_kernel_options(q, k, v, True, None)
    out, lse, *_ = flex_hop(q, k, v, _identity_score, mask.as_tuple(), scale, options)
    return out, lse * math.log(2.0)


def _identity_score(score, b, h, q_idx, kv_idx):
    return score


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(softmax(q k^T scale, causal) v, its log-sum-exp) for q [B, h, T, dq], k [B, kv, T, dq],
    v [B, kv, T, dv] with kv dividing h: output [B, h, T, dv] in v's dtype, log-sum-exp
    [B, h, T] fp32 (natural log), both differentiable."""
    mask = causal_block_mask(q.shape[2], q.device)
    if q.device.type == "cuda":
        return _cuda_flex(q, k, v, mask, scale, q.shape[1] != k.shape[1])
    return _eager_flex(q, k, v, mask, scale)
