"""The fast path's distillation loss: `loss.soft_ce`'s figures (soft cross-entropy against the
target's distribution over the draft vocabulary, draft argmax == target argmax) with the
gradient computed in the forward pass, chunk by chunk, so nothing is recomputed in backward.

`soft_ce` checkpoints each chunk: backward recomputes the teacher's logits ([C, Ht] x [Ht, Dv])
and the drafter's ([C, H] x [H, Dv]) before the two products of the head's backward. Here the
gradient of the loss with respect to the chunk's logits, q - p (q the drafter's distribution,
p the teacher's), is known as soon as both are, so each chunk runs three products and no more:
the logits, d/dx = (q - p) W and, for a trained head, d/dW += (q - p)^T x (this one over
`WEIGHT_GRAD_CHUNKS` chunks at once). The chunk's
[C, Dv] logits live only inside it, in fp32 (the softmax statistics); what is kept for
backward is d/dx ([B, L, H], the compute dtype) and d/dW (fp32, the size of the weight's
gradient), scaled there by the incoming gradient.

Two forms:
- `weighted_soft_ce`: the weights of every position are known before the loss (EAGLE-3: the
  trained mask x decay^k / normaliser), so the loss is the scalar Σ w·CE and a trained head's
  gradient is accumulated in forward, in one fp32 buffer for every TTT step;
- `frozen_head_soft_ce`: per-position CE, differentiable with respect to the states only (the
  head is the target's, frozen: DFlash), for weights that depend on the CE itself (D-PACE).

The teacher of each chunk comes from a `TeacherChunks` source: a table computed once per
micro-batch (`teacher_table`: EAGLE-3's steps share the same target positions, shifted) or the
target's head applied chunk by chunk (DFlash's per-slot positions, each used once). A source
gives the teacher's logits and their log-sum-exp, not its probabilities: the chunk's arithmetic
(`chunk_stats`) forms them, so that compiled it reads the teacher's logits once.

`compiled=True` (`--fast-path compiled`, which compiles the TTT merge too) runs `chunk_stats`
through `torch.compile`: its dozen elementwise passes over the [C, Dv] chunk (the cast, the
softmax statistics, the teacher's probabilities, CE, q - p, the weights, the cast back) become a
few fused kernels. On an H200 about 30% of the fast path's step was such unfused elementwise
work (`bench/results/train_gpu_profile.txt`); whether the compiled form is faster there is for
`bench/bench_train_gpu.py` to measure, so it is not the default. The two forms compute the same
figures (`tests/drafter/test_fast_path.py`).

Nothing here reads a device value on the host: the statistics stay tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from eyas.drafter import fast_path
from eyas.drafter.loss import chunk_len

# A trained head's gradient is accumulated once per this many chunks, in one product: each
# accumulation reads and writes the whole fp32 [Dv, H] buffer and reads the bf16 product (at
# Kimi width 0.9 GB, 2.3 GB moved, about three quarters of a chunk's own elementwise bytes), so
# once per chunk it was 11-12% of the Kimi MHA step's elementwise traffic
# (`bench/bench_train_traffic.py`). The chunks' bf16 q - p wait meanwhile: at most this many
# [C, Dv] tensors, each half the size of one of the chunk's fp32 [C, Dv] statistics.
WEIGHT_GRAD_CHUNKS = 4
# (row, start, end) -> (teacher logits [C, Dv], their log-sum-exp [C] fp32, argmax [C] long)
TeacherChunks = Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def compute_dtype(device: torch.device, *dtypes: torch.dtype) -> torch.dtype:
    """The matmul dtype: autocast's when it is on, else the widest of the operands'."""
    kind = device.type
    if torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    out = dtypes[0]
    for d in dtypes[1:]:
        out = torch.promote_types(out, d)
    return out


@dataclass
class TeacherTable:
    """The target's side of a micro-batch, once: full-vocabulary argmax [B, T], logits over the
    draft vocabulary [B, T, Dv] (compute dtype) and their log-sum-exp [B, T] (fp32)."""

    top: torch.Tensor
    logits: torch.Tensor
    lse: torch.Tensor

    def shifted(self, by: int, length: int) -> TeacherChunks:
        """Chunks of the positions by..by+length-1 (a view: no copy per step)."""

        def chunk(r: int, s: int, e: int):
            rows = slice(by + s, by + e)
            return self.logits[r, rows], self.lse[r, rows], self.top[r, rows]

        return chunk


@torch.no_grad()
def teacher_table(
    final: torch.Tensor, head: torch.Tensor, draft_ids: torch.Tensor | None, chunk: int = 1024
) -> TeacherTable:
    """One pass of the target's head over the micro-batch's final states ([B, T, Ht] x
    [V, Ht]^T, chunk by chunk): the argmax over the whole vocabulary, then the draft ids'
    columns of the same logits (`draft_ids` None: every column). The logits are kept in the
    compute dtype (bf16 under autocast: the target's own logits are bf16 when it serves)."""
    b, t = final.shape[:2]
    dtype = compute_dtype(final.device, final.dtype, head.dtype)
    weight = head.to(dtype)
    dv = head.shape[0] if draft_ids is None else len(draft_ids)
    top = torch.empty(b, t, dtype=torch.long, device=final.device)
    logits = torch.empty(b, t, dv, dtype=dtype, device=final.device)
    lse = torch.empty(b, t, dtype=torch.float32, device=final.device)
    step = chunk_len(b, head.shape[0], chunk)
    for s in range(0, t, step):
        full = final[:, s : s + step].to(dtype) @ weight.t()  # [B, C, V]
        top[:, s : s + step] = full.argmax(-1)
        cols = full if draft_ids is None else full.index_select(-1, draft_ids)
        logits[:, s : s + step] = cols
        lse[:, s : s + step] = torch.logsumexp(cols.float(), -1)
    return TeacherTable(top, logits, lse)


def head_chunks(hidden: torch.Tensor, head: torch.Tensor) -> TeacherChunks:
    """A teacher computed chunk by chunk from target states [B, N, Ht] and a head [Dv, Ht]
    (every column a draft id), for positions each used once."""

    def chunk(r: int, s: int, e: int):
        dtype = compute_dtype(hidden.device, hidden.dtype, head.dtype)
        z = (hidden[r, s:e].to(dtype) @ head.to(dtype).t()).float()
        return z, torch.logsumexp(z, -1), z.argmax(-1)

    return chunk


def chunk_stats(
    z: torch.Tensor,
    teacher_logits: torch.Tensor,
    teacher_lse: torch.Tensor,
    scale: torch.Tensor | None,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(CE [C] fp32, draft argmax [C], scale·(q - p) [C, Dv] in `dtype`) of one chunk from the
    drafter's logits z [C, Dv] and the teacher's logits and log-sum-exp; `scale` [C] the
    positions' loss weights (None: 1)."""
    zf = z.float()
    lse = torch.logsumexp(zf, -1)
    p = torch.exp(teacher_logits.float() - teacher_lse[:, None])
    ce = lse - (p * zf).sum(-1)  # -Σ p log q, with Σ p = 1
    g = torch.exp(zf - lse[:, None]) - p
    if scale is not None:
        g = g * scale[:, None]
    return ce, zf.argmax(-1), g.to(dtype)


def _chunk(x, weight, teacher, scale, dtype, compiled):
    """`chunk_stats` of x [C, H] against the head weight [Dv, H] (both in the compute dtype)
    and the teacher's (logits, lse, argmax); returns its three figures and the teacher's
    argmax."""
    t_logits, t_lse, top = teacher
    stats = fast_path.compiled(chunk_stats, compiled)
    ce, pred, g = stats(x @ weight.t(), t_logits, t_lse, scale, dtype)
    return ce, pred, g, top


def _setup(x, weight, draft_ids):
    dtype = compute_dtype(x.device, x.dtype, weight.dtype)
    b, n = x.shape[:2]
    ce = torch.zeros(b, n, dtype=torch.float32, device=x.device)
    correct = torch.zeros(b, n, dtype=torch.bool, device=x.device)
    grad_x = torch.zeros(x.shape, dtype=dtype, device=x.device)
    return dtype, weight.to(dtype), ce, correct, grad_x


def _draft_ids(pred, draft_ids):
    return pred if draft_ids is None else draft_ids[pred]


class _WeightedSoftCE(torch.autograd.Function):
    """Σ over several inputs sharing one head (EAGLE-3's TTT steps) of Σ_j w_j·CE_j: one
    weight-gradient buffer for all of them, each input's gradient its own."""

    @staticmethod
    def forward(ctx, weight, parts, draft_ids, chunk, compiled, *xs):
        dtype = compute_dtype(weight.device, weight.dtype, *(x.dtype for x in xs))
        w = weight.to(dtype)
        grad_w = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
            if ctx.needs_input_grad[0]
            else None
        )
        total = torch.zeros((), dtype=torch.float32, device=weight.device)
        figures, grads = [], []
        for x, (weights, teacher) in zip(xs, parts):
            b, n = x.shape[:2]
            ce = torch.zeros(b, n, dtype=torch.float32, device=x.device)
            correct = torch.zeros(b, n, dtype=torch.bool, device=x.device)
            grad_x = torch.zeros(x.shape, dtype=dtype, device=x.device)
            for r in range(b):
                pending: list[torch.Tensor] = []  # chunks' q - p not yet in grad_w
                for s in range(0, n, chunk):
                    e = min(n, s + chunk)
                    xc = x[r, s:e].to(dtype)
                    ce_c, pred, g, top = _chunk(
                        xc, w, teacher(r, s, e), weights[r, s:e], dtype, compiled
                    )
                    ce[r, s:e] = ce_c
                    correct[r, s:e] = _draft_ids(pred, draft_ids) == top
                    grad_x[r, s:e] = g @ w
                    if grad_w is not None:
                        pending.append(g)
                        if len(pending) == WEIGHT_GRAD_CHUNKS or e == n:
                            start = e - sum(len(p) for p in pending)
                            span = x[r, start:e].to(dtype)
                            grad_w += torch.cat(pending).t() @ span
                            pending = []
            total += (ce * weights).sum()
            figures += [ce, correct]
            grads.append(grad_x)
        ctx.save_for_backward(grad_w, *grads)
        ctx.dtypes = (weight.dtype, [x.dtype for x in xs])
        ctx.mark_non_differentiable(*figures)
        return (total, *figures)

    @staticmethod
    def backward(ctx, grad_loss, *_figures):
        grad_w, *grads = ctx.saved_tensors
        w_dtype, x_dtypes = ctx.dtypes
        gw = None if grad_w is None else (grad_w * grad_loss).to(w_dtype)
        gxs = [(g * grad_loss).to(d) for g, d in zip(grads, x_dtypes)]
        return gw, None, None, None, None, *gxs


class _FrozenHeadSoftCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, teacher, draft_ids, chunk, compiled):
        dtype, w, ce, correct, grad_x = _setup(x, weight, draft_ids)
        b, n = x.shape[:2]
        for r in range(b):
            for s in range(0, n, chunk):
                e = min(n, s + chunk)
                ce_c, pred, g, top = _chunk(
                    x[r, s:e].to(dtype), w, teacher(r, s, e), None, dtype, compiled
                )
                ce[r, s:e] = ce_c
                correct[r, s:e] = _draft_ids(pred, draft_ids) == top
                grad_x[r, s:e] = g @ w  # d CE_j / d x_j, per position
        ctx.save_for_backward(grad_x)
        ctx.x_dtype = x.dtype
        ctx.mark_non_differentiable(correct)
        return ce, correct

    @staticmethod
    def backward(ctx, grad_ce, _correct):
        (grad_x,) = ctx.saved_tensors
        return (grad_x * grad_ce[..., None]).to(ctx.x_dtype), None, None, None, None, None


def weighted_soft_ce(
    xs: list[torch.Tensor],
    weight: torch.Tensor,
    weights: list[torch.Tensor],
    teachers: list[TeacherChunks],
    draft_ids: torch.Tensor | None,
    chunk: int = 1024,
    compiled: bool = False,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """(Σ_i Σ_j weights_i·CE_i, [(CE_i, draft argmax == teacher argmax)_i]) for inputs
    xs_i [B, N_i, H] sharing the draft head's weight [Dv, H] (a plain tensor: trained or
    frozen), each with its weights [B, N_i] (no gradient) and teacher. Differentiable in every
    x_i and, when it requires grad, the weight, whose gradient is one buffer for all."""
    chunk = chunk_len(1, weight.shape[0], chunk)  # per row
    parts = [(w.detach().float(), t) for w, t in zip(weights, teachers, strict=True)]
    total, *figures = _WeightedSoftCE.apply(weight, parts, draft_ids, chunk, compiled, *xs)
    return total, [(figures[2 * i], figures[2 * i + 1]) for i in range(len(xs))]


def frozen_head_soft_ce(
    x: torch.Tensor,
    weight: torch.Tensor,
    teacher: TeacherChunks,
    draft_ids: torch.Tensor | None = None,
    chunk: int = 1024,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(CE [B, N], correct [B, N]) against a frozen head [Dv, H]; CE is differentiable in x."""
    if weight.requires_grad:
        raise ValueError("frozen_head_soft_ce: the head must be frozen (weighted_soft_ce)")
    chunk = chunk_len(1, weight.shape[0], chunk)  # per row
    return _FrozenHeadSoftCE.apply(x, weight, teacher, draft_ids, chunk, compiled)
