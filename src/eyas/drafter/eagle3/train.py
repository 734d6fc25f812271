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

from eyas.drafter.fused_loss import compute_dtype, teacher_table, weighted_soft_ce
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


def ttt_loss_fast(
    step_hidden: list[torch.Tensor],
    teacher: Teacher,
    supervised: torch.Tensor,
    head_weight: torch.Tensor,
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    normalizer: list[float],
    decay: float = 0.8,
    chunk: int = 1024,
    compiled: bool = False,
) -> tuple[torch.Tensor, list[StepStats]]:
    """`ttt_loss`'s loss and figures on the fast path (`eyas.drafter.fused_loss`):

    - the teacher once per micro-batch (`teacher_table`: one pass of the target's head gives
      the full-vocabulary argmax and the draft columns), each step reading it shifted by
      1 + k, a view;
    - step k runs over the T - 1 - k indices that have a teacher (the rest are masked in
      `ttt_loss` too), its gradient computed in forward (`weighted_soft_ce`, one weight-gradient
      buffer for all steps), nothing recomputed in backward;
    - the figures stay device tensors (`StepStats`, `loss.resolved`): no host sync.

    `head_weight` is the draft head's weight, a plain tensor (trained or frozen); a head sharded
    by FSDP2 goes through `ttt_loss`, which calls the module."""
    t = supervised.shape[1]
    full_vocab = len(draft_ids) == len(t2d)
    table = teacher_table(teacher.final, teacher.head, None if full_vocab else draft_ids, chunk)
    dtype = compute_dtype(supervised.device, step_hidden[0].dtype, head_weight.dtype)
    xs, weights, teachers, masks = [], [], [], []
    for k, normed in enumerate(step_hidden):
        mask_k = step_mask(supervised, k)
        length = max(0, t - 1 - k)
        trained = mask_k[:, :length] & t2d[table.top[:, 1 + k : 1 + k + length]]
        # the head reads the compute dtype: its gradient comes back in it (not fp32)
        xs.append(normed[:, :length].to(dtype))
        weights.append(trained * (decay**k / max(normalizer[k], 1.0)))
        teachers.append(table.shifted(1 + k, length))
        masks.append((mask_k, trained))
    total, figures = weighted_soft_ce(
        xs, head_weight, weights, teachers, None if full_vocab else draft_ids, chunk, compiled
    )
    stats = [
        StepStats((ce * trained).sum(), mask_k.sum(), (correct & trained).sum(), trained.sum())
        for (ce, correct), (mask_k, trained) in zip(figures, masks)
    ]
    return total, stats
