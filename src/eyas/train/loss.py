"""The TTT loss: soft cross-entropy against the target's next-token distribution restricted to
the draft vocabulary, weighted 0.8^k over K unrolled steps (pure PyTorch: the CPU path and the
reference for any fused kernel).

Alignment, in one place. For sequence x_0..x_{N-1} with `supervised[k]` = 1 iff x_k is
trained, draft step k at index j reads x_{j+1+k} and the target's hidden state h_j, and
predicts x_{j+2+k}. Its teacher is the target distribution at position j+1+k and its mask is
supervised[j+2+k]: the mask shifts together with the targets, so the first generated token of
every turn is trained.

Memory. Neither the target's logits [T, V] nor the drafter's [T, Dv] exist for a whole
sequence: the teacher is computed from the target's final (post-norm) hidden states and its
`lm_head`, and both sides are computed, and recomputed in backward, one chunk of positions at
a time (activation checkpointing), so memory grows with the chunk, not with T·V.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _shift(x: torch.Tensor, by: int, fill) -> torch.Tensor:
    """x[:, by:] padded at the end back to length T. x: [B, T, ...]."""
    if by == 0:
        return x
    pad = torch.full_like(x[:, :by], fill)
    return torch.cat([x[:, by:], pad], 1) if x.shape[1] > by else pad[:, : x.shape[1]]


def step_mask(supervised: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T] bool: index j of step k is trained iff x_{j+2+k} is supervised."""
    return _shift(supervised.bool(), 2 + k, False)


def step_teacher(final: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T, Ht]: the target's final hidden state at position j+1+k for index j."""
    return _shift(final, 1 + k, 0.0)


@dataclass
class StepStats:
    loss_sum: float
    positions: int
    correct: int
    in_vocab: int


@dataclass
class Teacher:
    """The target's side of the loss: final hidden states and the output head."""

    final: torch.Tensor  # [B, T, Ht] after the target's final norm
    head: torch.Tensor  # [V, Ht] the target's lm_head weight


def _chunk_loss(
    normed: torch.Tensor,
    teacher_hidden: torch.Tensor,
    mask: torch.Tensor,
    head: torch.Tensor,
    draft_head: Callable[[torch.Tensor], torch.Tensor],
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(CE sum, correct count, in-vocab count) for one chunk. normed: [B, C, H];
    teacher_hidden: [B, C, Ht]; mask: [B, C]."""
    teacher = teacher_hidden.float() @ head.float().t()  # [B, C, V]
    top = teacher.argmax(-1)  # [B, C]
    in_vocab = t2d[top] & mask
    p = torch.softmax(teacher[..., draft_ids], -1)  # renormalised over the draft vocab
    logits = draft_head(normed).float()  # [B, C, Dv]
    ce = -(p * F.log_softmax(logits, -1)).sum(-1)
    correct = (draft_ids[logits.argmax(-1)] == top) & in_vocab
    return (ce * in_vocab).sum(), correct.sum(), in_vocab.sum()


def ttt_loss(
    step_hidden: list[torch.Tensor],
    teacher: Teacher,
    supervised: torch.Tensor,
    draft_head: Callable[[torch.Tensor], torch.Tensor],
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    normalizer: list[float],
    decay: float = 0.8,
    chunk: int = 1024,
) -> tuple[torch.Tensor, list[StepStats]]:
    """Σ_k decay^k · (Σ masked soft-CE at step k) / normalizer[k].

    `step_hidden[k]` is the drafter's normalised hidden state of step k ([B, T, H]) and
    `draft_head` its lm_head (a module: under FSDP2 calling it gathers its shard). `normalizer[k]` is the number of trained
    positions of step k over the whole optimizer step (all micro-batches and ranks), so padding
    and accumulation never reweight samples. Positions whose target argmax is outside the draft
    vocabulary are excluded; their share is reported as draft-vocab coverage.
    """
    b, t = supervised.shape
    # keep a chunk's [B, C, V] teacher logits near 2^26 elements
    chunk = max(16, min(chunk, (1 << 26) // max(1, b * teacher.head.shape[0])))
    total = step_hidden[0].new_zeros((), dtype=torch.float32)
    stats = []
    for k, normed in enumerate(step_hidden):
        teacher_k = step_teacher(teacher.final, k)
        mask_k = step_mask(supervised, k)
        loss_sum = total.new_zeros(())
        correct = in_vocab = 0
        for start in range(0, t, chunk):
            sl = slice(start, start + chunk)
            args = (normed[:, sl], teacher_k[:, sl], mask_k[:, sl], teacher.head, draft_head)
            if torch.is_grad_enabled() and normed.requires_grad:
                part, c, n = checkpoint(_chunk_loss, *args, draft_ids, t2d, use_reentrant=False)
            else:
                part, c, n = _chunk_loss(*args, draft_ids, t2d)
            loss_sum = loss_sum + part
            correct += int(c)
            in_vocab += int(n)
        total = total + (decay**k) * loss_sum / max(normalizer[k], 1.0)
        stats.append(StepStats(float(loss_sum.detach()), int(mask_k.sum()), correct, in_vocab))
    return total, stats
