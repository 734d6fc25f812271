"""The EAGLE-3 TTT loss: soft cross-entropy against the target's next-token distribution
restricted to the draft vocabulary, weighted decay^k over K unrolled steps.

Alignment, in one place. For sequence x_0..x_{N-1} with `supervised[k]` = 1 iff x_k is
trained, draft step k at index j reads x_{j+1+k} and the target's hidden state h_j, and
predicts x_{j+2+k}. Its teacher is the target distribution at position j+1+k and its mask is
supervised[j+2+k]: the mask shifts together with the targets, so the first generated token of
every turn is trained.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eyas.drafter.loss import StepStats, Teacher, shift, soft_ce, teacher_argmax


def step_mask(supervised: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T] bool: index j of step k is trained iff x_{j+2+k} is supervised."""
    return shift(supervised.bool(), 2 + k, False)


def step_teacher(final: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T, Ht]: the target's final hidden state at position j+1+k for index j."""
    return shift(final, 1 + k, 0.0)


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
    `draft_head` its lm_head. `normalizer[k]` is the number of trained positions of step k
    over the whole optimizer step (all micro-batches and ranks), so padding and accumulation
    never reweight samples. Positions whose target argmax is outside the draft vocabulary are
    excluded; their share is reported as draft-vocab coverage.
    """
    total = step_hidden[0].new_zeros((), dtype=torch.float32)
    stats = []
    # Every step's teacher is the same target positions, shifted: the full-vocabulary argmax
    # is computed once, and each step's soft CE needs only the draft ids' rows of the head.
    top = teacher_argmax(teacher.final, teacher.head, chunk)
    draft_rows = teacher.head.index_select(0, draft_ids.to(teacher.head.device))
    for k, normed in enumerate(step_hidden):
        mask_k = step_mask(supervised, k)
        ce, correct, in_vocab = soft_ce(
            normed,
            step_teacher(teacher.final, k),
            draft_rows,
            draft_head,
            draft_ids,
            t2d,
            chunk,
            top=shift(top, 1 + k, 0),
        )
        trained = in_vocab & mask_k
        loss_sum = (ce * trained).sum()
        total = total + (decay**k) * loss_sum / max(normalizer[k], 1.0)
        stats.append(
            StepStats(
                float(loss_sum.detach()),
                int(mask_k.sum()),
                int((correct & trained).sum()),
                int(trained.sum()),
            )
        )
    return total, stats
