"""The training-time-test attention of EAGLE-3 drafters, exact and linear in memory: shared by
the MHA layer (`eagle3.model.Attention`) and the MLA one (`mla.MLAAttention`), so neither
attention module imports the other's. `ttt_attention` is the reference path (SDPA with a sink),
`ttt_attention_fast` the fast one (FlexAttention, `eyas.drafter.flex`); `drafter/fast_path.py`
says which runs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

_SINK_DIMS = 8  # extra head dims for the sink; a multiple of 8 keeps fused kernels eligible


def ttt_attention(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    diagonal: list[tuple[torch.Tensor, torch.Tensor]],
    scale: float,
) -> torch.Tensor:
    """softmax over {step-0 keys at positions <= j} ∪ {step-s keys at j, s = 1..S} for every
    query j, with no [T, T] tensor in forward or backward.

    The causal part runs in `scaled_dot_product_attention` (a fused, memory-linear kernel on
    CPU and GPU). The S diagonal scores are merged exactly through the causal part's
    normaliser, which SDPA exposes through a sink: an extra key, visible to every query, whose
    score is a per-query constant c_j (an extra q dim; the other keys are 0 there) and whose
    value is a unit in an extra v dim. With Z the causal normaliser, SDPA returns
    o = O / (Z + e^c) and p = e^c / (Z + e^c), so with w_s = e^(d_s - c):
        out = (O + Σ_s e^(d_s) v_s) / (Z + Σ_s e^(d_s))
            = (o + p Σ_s w_s v_s) / (1 - p + p Σ_s w_s).
    c_j = max_s d_s keeps every w_s <= 1. A dummy first query lets the top-left causal mask put
    the sink at key 0 for all real queries.

    q, k0, v0: [B, h, T, d]; diagonal: S pairs of [B, h, T, d]. Returns [B, h, T, d]. Values
    of another width than the keys (MLA: v_head_dim 128, q/k 192) are zero-padded to the keys'
    (or keys and queries to the values'): the scores and the kept output columns are unchanged,
    and one head width keeps the fused kernels eligible.
    """
    dq, dv = q.shape[-1], v0.shape[-1]
    if dq != dv:
        width = max(dq, dv)

        def pad(x):
            return F.pad(x, (0, width - x.shape[-1]))

        out = ttt_attention(
            pad(q), pad(k0), pad(v0), [(pad(ks), pad(vs)) for ks, vs in diagonal], scale
        )
        return out[..., :dv]
    if not diagonal:
        return F.scaled_dot_product_attention(q, k0, v0, is_causal=True, scale=scale)
    b, h, t, d = q.shape
    scores = torch.stack([(q * ks).sum(-1) for ks, _ in diagonal], -1) * scale  # [B, h, T, S]
    extra = q.new_zeros(b, h, t, _SINK_DIMS)
    # The sink's score is what the kernel computes from this stored value, in its dtype.
    extra[..., 0] = (scores.detach().amax(-1).float() / scale).to(q.dtype)
    c = extra[..., 0].float() * scale  # [B, h, T]
    unit = q.new_zeros(b, h, 1, d + _SINK_DIMS)
    unit[..., d] = 1.0
    qx = torch.cat([q.new_zeros(b, h, 1, d + _SINK_DIMS), torch.cat([q, extra], -1)], 2)
    kx = torch.cat([unit, F.pad(k0, (0, _SINK_DIMS))], 2)  # [B, h, T+1, d+8]
    vx = torch.cat([unit, F.pad(v0, (0, _SINK_DIMS))], 2)
    o = F.scaled_dot_product_attention(qx, kx, vx, is_causal=True, scale=scale)[:, :, 1:]
    p = o[..., d : d + 1].float()  # [B, h, T, 1]
    w = torch.exp(scores.float() - c[..., None])  # [B, h, T, S], each <= 1
    diag_sum = sum(w[..., s : s + 1] * vs.float() for s, (_, vs) in enumerate(diagonal))
    num = o[..., :d].float() + p * diag_sum
    den = (1.0 - p) + p * w.sum(-1, keepdim=True)
    return (num / den).to(q.dtype)


def ttt_attention_fast(
    q: torch.Tensor,
    k0: torch.Tensor,
    v0: torch.Tensor,
    diagonal: list[tuple[torch.Tensor, torch.Tensor]],
    scale: float,
    compiled: bool = False,
) -> torch.Tensor:
    """`ttt_attention`'s function on the fast path: the same softmax over {step-0 keys at
    positions <= j} ∪ {step-s keys at j}, merged through the causal part's log-sum-exp.

    With (O, L) the causal kernel's normalised output and log-sum-exp (`eyas.drafter.flex`,
    differentiable in both) and d_s = q_j . k_s,j * scale the diagonal scores:
        out = (e^L O + Σ_s e^(d_s) v_s) / (e^L + Σ_s e^(d_s)),
    computed with m = max(L, d_s) subtracted. Keys and values keep their kv heads (GQA: each
    query head reads its group's, through views), values may be narrower than the keys (MLA),
    and nothing wider than the softmax statistics ([B, h, T] and [B, h, T, S]) is fp32: the
    output is a weighted sum of bf16 tensors under bf16.

    q: [B, h, T, dq]; k0, v0 and each diagonal pair: [B, kv, T, dq] / [B, kv, T, dv], kv
    dividing h. Returns [B, h, T, dv] in v0's dtype. `compiled`: the merge through
    `torch.compile` (`--fast-path compiled`).
    """
    from eyas.drafter.flex import causal_attention

    out, lse = causal_attention(q, k0, v0, scale)
    if not diagonal:
        return out
    keys, values = [k for k, _ in diagonal], [v for _, v in diagonal]
    from eyas.drafter.fast_path import compiled as compile_once

    merge = compile_once(merge_diagonal, compiled)
    return merge(out, lse, q, keys, values, scale)


def merge_diagonal(
    out: torch.Tensor,
    lse: torch.Tensor,
    q: torch.Tensor,
    keys: list[torch.Tensor],
    values: list[torch.Tensor],
    scale: float,
) -> torch.Tensor:
    """The causal part (O, L) merged with the diagonal steps' keys and values
    (`ttt_attention_fast`'s formula)."""
    b, h, t, _ = q.shape
    kv = keys[0].shape[1]
    groups = (b, kv, h // kv, t)
    qg = q.unflatten(1, (kv, h // kv))  # [B, kv, rep, T, dq], a view
    scores = torch.stack(
        [(qg * ks.unsqueeze(2)).sum(-1).float() * scale for ks in keys], -1
    )  # [B, kv, rep, T, S]
    lse = lse.float().view(groups)
    top = torch.maximum(lse, scores.amax(-1)).detach()
    causal_w = torch.exp(lse - top)
    diag_w = torch.exp(scores - top[..., None])
    den = causal_w + diag_w.sum(-1)
    dtype = out.dtype
    merged = out.unflatten(1, (kv, h // kv)) * (causal_w / den)[..., None].to(dtype)
    for s, vs in enumerate(values):
        merged = merged + vs.unsqueeze(2) * (diag_w[..., s] / den)[..., None].to(dtype)
    return merged.flatten(1, 2)


__all__ = ["merge_diagonal", "ttt_attention", "ttt_attention_fast"]
