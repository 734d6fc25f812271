"""The TTT loss: soft cross-entropy against the target's next-token distribution restricted to
the draft vocabulary, weighted 0.8^k over K unrolled steps (pure PyTorch: the CPU path and the
reference for any fused kernel, anchors.md #43).

Alignment, in one place (anchors.md #25). For sequence x_0..x_{N-1} with `supervised[k]` = 1
iff x_k is trained, draft step k at index j reads x_{j+1+k} and the target's hidden state
h_j, and predicts x_{j+2+k}. Its teacher is the target distribution at position j+1+k and its
mask is supervised[j+2+k]: the mask shifts together with the targets, so the first generated
token of every turn is trained.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def _shift(x: torch.Tensor, by: int, fill) -> torch.Tensor:
    """x[:, by:] padded at the end back to length T. x: [B, T, ...]."""
    if by == 0:
        return x
    pad = torch.full_like(x[:, :by], fill)
    return torch.cat([x[:, by:], pad], 1) if x.shape[1] > by else pad[:, : x.shape[1]]


def step_mask(supervised: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T] bool: index j of step k is trained iff x_{j+2+k} is supervised."""
    return _shift(supervised.bool(), 2 + k, False)


def step_teacher_logits(target_logits: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T, V]: the target distribution at position j+1+k for index j."""
    return _shift(target_logits, 1 + k, 0.0)


@dataclass
class StepStats:
    loss_sum: float
    positions: int
    correct: int
    in_vocab: int


def ttt_loss(
    draft_logits: list[torch.Tensor],
    target_logits: torch.Tensor,
    supervised: torch.Tensor,
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    normalizer: list[float],
    decay: float = 0.8,
) -> tuple[torch.Tensor, list[StepStats]]:
    """Σ_k decay^k · (Σ masked soft-CE at step k) / normalizer[k].

    `normalizer[k]` is the number of trained positions of step k over the whole optimizer step
    (all micro-batches and ranks), so padding and accumulation never reweight samples
    (anchors.md #39). Positions whose target argmax is outside the draft vocabulary are
    excluded (anchors.md #40); their share is reported as draft-vocab coverage.
    """
    total = draft_logits[0].new_zeros(())
    stats = []
    for k, logits in enumerate(draft_logits):
        teacher = step_teacher_logits(target_logits, k).float()  # [B, T, V]
        mask = step_mask(supervised, k)  # [B, T]
        top = teacher.argmax(-1)  # [B, T]
        in_vocab = t2d[top] & mask
        p = torch.softmax(teacher[..., draft_ids], -1)  # renormalised over the draft vocab
        logq = F.log_softmax(logits.float(), -1)  # [B, T, Dv]
        ce = -(p * logq).sum(-1)  # [B, T]
        loss_sum = (ce * in_vocab).sum()
        total = total + (decay**k) * loss_sum / max(normalizer[k], 1.0)
        correct = (draft_ids[logits.argmax(-1)] == top) & in_vocab
        stats.append(
            StepStats(
                float(loss_sum.detach()), int(mask.sum()), int(correct.sum()), int(in_vocab.sum())
            )
        )
    return total, stats
