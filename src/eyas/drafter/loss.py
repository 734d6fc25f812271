"""The distillation loss every method trains with: soft cross-entropy of the drafter's
distribution against the target's next-token distribution, restricted to the draft vocabulary
(pure PyTorch: the CPU path and the reference for any fused kernel). Each method decides which
drafter position is taught by which target position, and how positions are weighted.

Memory. Neither the target's logits [N, V] nor the drafter's [N, Dv] exist for a whole
sequence: the teacher is computed from the target's final (post-norm) hidden states and its
`lm_head`, and both sides are computed, and recomputed in backward, one chunk of positions at
a time (activation checkpointing), so memory grows with the chunk, not with N·V.

Compute. The teacher needs no gradient, and of the target's full-vocabulary logits only the
argmax is used beyond the draft vocabulary (to exclude positions the draft vocabulary cannot
hit). So a method that drafts over a draft vocabulary computes the full-vocabulary argmax once
per position (`teacher_argmax`, no grad) and, inside the checkpointed chunks, only the
draft-vocabulary rows of the head (`soft_ce(..., top=)`): [Dv, Ht] products instead of
[V, Ht] ones, twice per drafted step (forward and the backward recomputation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class StepStats:
    """One drafted position's figures over a micro-batch (a TTT step, a block slot). The fast
    path leaves them as 0-dim device tensors, so no step waits on the device for them;
    `resolved` turns a micro-batch's into numbers with one transfer."""

    loss_sum: float | torch.Tensor
    positions: int | torch.Tensor
    correct: int | torch.Tensor
    in_vocab: int | torch.Tensor


def resolved(stats: list[StepStats]) -> list[StepStats]:
    """The figures as Python numbers: one device-to-host copy for all of them (call it once the
    micro-batch's backward is queued); numbers pass through."""
    cells = [
        getattr(st, f) for st in stats for f in ("loss_sum", "positions", "correct", "in_vocab")
    ]
    if not any(isinstance(c, torch.Tensor) for c in cells):
        return stats
    device = next(c.device for c in cells if isinstance(c, torch.Tensor))
    values = torch.stack(
        [torch.as_tensor(c, device=device).detach().double() for c in cells]
    ).tolist()
    return [
        StepStats(values[4 * i], round(values[4 * i + 1]), round(values[4 * i + 2]),
                  round(values[4 * i + 3]))
        for i in range(len(stats))
    ]  # fmt: skip


@dataclass
class Teacher:
    """The target's side of the loss: final hidden states and the output head."""

    final: torch.Tensor  # [B, T, Ht] after the target's final norm
    head: torch.Tensor  # [V, Ht] the target's lm_head weight


def _chunk(
    normed: torch.Tensor,
    teacher_hidden: torch.Tensor,
    head: torch.Tensor,
    draft_head: Callable[[torch.Tensor], torch.Tensor],
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    top: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(soft CE [B, C], draft argmax == target argmax [B, C], target argmax in the draft
    vocabulary [B, C]) for one chunk. normed: [B, C, H]; teacher_hidden: [B, C, Ht]. With
    `top` (the target's full-vocabulary argmax [B, C]) `head` holds only the draft ids' rows."""
    teacher = teacher_hidden.float() @ head.float().t()  # [B, C, V], or [B, C, Dv] with top
    if top is None:
        top = teacher.argmax(-1)  # [B, C]
        teacher = teacher[..., draft_ids]
    p = torch.softmax(teacher, -1)  # renormalised over the draft vocab
    logits = draft_head(normed).float()  # [B, C, Dv]
    ce = -(p * F.log_softmax(logits, -1)).sum(-1)
    return ce, draft_ids[logits.argmax(-1)] == top, t2d[top]


def chunk_len(batch: int, rows: int, chunk: int) -> int:
    """Keep a chunk's [B, C, rows] teacher logits near 2^26 elements."""
    return max(16, min(chunk, (1 << 26) // max(1, batch * rows)))


@torch.no_grad()
def teacher_argmax(final: torch.Tensor, head: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """[B, T] the target's full-vocabulary argmax at every position, chunk by chunk."""
    b, t = final.shape[:2]
    step = chunk_len(b, head.shape[0], chunk)
    parts = [
        (final[:, s : s + step].float() @ head.float().t()).argmax(-1) for s in range(0, t, step)
    ]
    return torch.cat(parts, 1) if parts else final.new_zeros(b, 0, dtype=torch.long)


def soft_ce(
    normed: torch.Tensor,
    teacher_hidden: torch.Tensor,
    head: torch.Tensor,
    draft_head: Callable[[torch.Tensor], torch.Tensor],
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    chunk: int = 1024,
    *,
    top: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Elementwise soft CE, correctness and in-vocabulary flags, all [B, N], computed chunk by
    chunk over N. `draft_head` is the drafter's lm_head module (under FSDP2 calling it gathers
    its shard). With `top` ([B, N], `teacher_argmax`) `head` is the target head's draft-id
    rows only ([Dv, Ht]): the same figures at a fraction of the cost."""
    b, n = normed.shape[:2]
    chunk = chunk_len(b, head.shape[0], chunk)
    parts = []
    for start in range(0, n, chunk):
        sl = slice(start, start + chunk)
        args = (normed[:, sl], teacher_hidden[:, sl], head, draft_head, draft_ids, t2d)
        if top is not None:
            args = (*args, top[:, sl])
        if torch.is_grad_enabled() and normed.requires_grad:
            parts.append(checkpoint(_chunk, *args, use_reentrant=False))
        else:
            parts.append(_chunk(*args))
    if not parts:
        empty = normed.new_zeros(b, 0)
        return empty, empty.bool(), empty.bool()
    return tuple(torch.cat([p[i] for p in parts], 1) for i in range(3))  # type: ignore[return-value]


def shift(x: torch.Tensor, by: int, fill) -> torch.Tensor:
    """x[:, by:] padded at the end back to length T. x: [B, T, ...]."""
    if by == 0:
        return x
    pad = torch.full_like(x[:, :by], fill)
    return torch.cat([x[:, by:], pad], 1) if x.shape[1] > by else pad[:, : x.shape[1]]
