"""P-EAGLE training: COD sampling of the parallel positions, and the loss.

Alignment, in one place. For a sequence x_0..x_{N-1} with `supervised[k]` = 1 iff x_k is
trained, the element (anchor a, depth d) reads x_{a+1} and h_a (depth 0) or the mask token and
`mask_hidden` (d >= 1) at position a + d, predicts x_{a+2+d}: its teacher is the target's
distribution at position a+1+d and its mask supervised[a+2+d], EAGLE-3's step d at index a
(`eyas.drafter.eagle3.train.step_mask`, `step_teacher`). speculators 0.9.0 reads the same
elements (`models/peagle/core.py`: `targets[:, anchor_pos + depth]` after `shift_batch`); its
loss mask is the batch's `loss_mask` shifted as the inputs are, one position earlier than the
predicted token, so eyas trains the first answer token and never the one after the last.

COD (conditional-on-distribution) sampling, speculators' `generate_cod_sample_indices`
(`models/peagle/data.py`) row by row: depth 0 is every position; the supervised positions p
(mask of depth 0 at p) are the candidates, at most `max_anchors` of them drawn as seeds; depth
d >= 1 keeps int((#seeds - d) * max(ratio^d, ratio_min)) of the previous depth's candidates
(all of them when fewer are left), and the next depth's candidates are the kept positions
plus one that are themselves supervised. An element at position p of depth d has anchor
p - d, so every element's chain (the same anchor at depths 1..d-1) was kept before it. The
draws come from a generator seeded per sequence and batch position (`row_seed`): the batch is
the same on any number of ranks and after a resume. One difference: position 0 never seeds a
chain (its anchor would be -1; speculators indexes position -1 there).

Loss (speculators `compute_metrics`: one count-normalised mean, no weight per depth): Σ over
the sampled elements of the soft cross-entropy against the target's distribution over the
draft vocabulary, divided by their number over the whole optimizer step. speculators trains
KL(target || draft), the same gradients (the soft CE minus the target's entropy). As EAGLE-3,
positions whose target argmax is outside the draft vocabulary are not trained.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eyas.drafter.eagle3.train import step_mask, step_teacher
from eyas.drafter.loss import StepStats, Teacher, shift, soft_ce, teacher_argmax


def cod_sample(
    trained: torch.Tensor,
    depths: int,
    ratio: float,
    ratio_min: float,
    max_anchors: int | None,
    seed: int,
) -> list[torch.Tensor]:
    """One row's sampled anchors of depths 1..D-1 (sorted; empty past the deepest sampled).

    trained: [T] bool, depth 0's mask (position p trains iff x_{p+2} is supervised)."""
    t = trained.shape[0]
    gen = torch.Generator().manual_seed(seed)
    valid = trained.bool().cpu().nonzero().flatten()
    seeds = valid[valid >= 1]
    if max_anchors is not None and len(seeds) > max_anchors:
        seeds = seeds[torch.randperm(len(seeds), generator=gen)[:max_anchors]].sort().values
    pool = seeds
    out = []
    for d in range(1, depths):
        size = int(max(0, len(seeds) - d) * max(ratio**d, ratio_min))
        if size <= 0:
            break
        if len(pool) >= size:
            kept = pool[torch.randperm(len(pool), generator=gen)[:size]].sort().values
        else:
            kept = pool
        nxt = kept + 1
        pool = nxt[(nxt < t) & torch.isin(nxt, valid)]
        out.append(kept - d)
    return out + [torch.zeros(0, dtype=torch.long)] * (depths - 1 - len(out))


def sample_depths(
    supervised: torch.Tensor,
    depths: int,
    ratio: float,
    ratio_min: float,
    max_anchors: int | None,
    seeds: list[int],
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per depth d >= 1, (rows, anchors) of its sampled elements over the batch."""
    trained = step_mask(supervised, 0).cpu()
    per_row = [
        cod_sample(trained[r], depths, ratio, ratio_min, max_anchors, seed)
        for r, seed in enumerate(seeds)
    ]
    out = []
    for d in range(depths - 1):
        anchors = [row[d] for row in per_row]
        rows = torch.cat([torch.full_like(a, r) for r, a in enumerate(anchors)])
        out.append((rows.to(supervised.device), torch.cat(anchors).to(supervised.device)))
    return out


def depth_counts(supervised: torch.Tensor, sampled: list) -> torch.Tensor:
    """[D] float64: trained elements per depth (depth 0: every trained position)."""
    first = float(step_mask(supervised, 0).sum())
    return torch.tensor([first, *(float(len(a)) for _, a in sampled)], dtype=torch.float64)


def parallel_loss(
    states: list[torch.Tensor],
    teacher: Teacher,
    supervised: torch.Tensor,
    sampled: list[tuple[torch.Tensor, torch.Tensor]],
    draft_head: Callable[[torch.Tensor], torch.Tensor],
    draft_ids: torch.Tensor,
    t2d: torch.Tensor,
    normalizer: float,
    chunk: int = 1024,
) -> tuple[torch.Tensor, list[StepStats]]:
    """Σ soft-CE over depth 0's trained positions and every sampled element / normalizer.

    `states[d]` is depth d's normalised state at every anchor ([B, T, H]). A depth with no
    sampled element still enters the graph through one untrained element, so every rank's
    backward reaches `mask_hidden` (DDP's collective needs every rank's gradients)."""
    top = teacher_argmax(teacher.final, teacher.head, chunk)
    draft_rows = teacher.head.index_select(0, draft_ids.to(teacher.head.device))
    zero = torch.zeros(1, dtype=torch.long, device=supervised.device)
    total = states[0].new_zeros((), dtype=torch.float32)
    stats = []
    for d, normed in enumerate(states):
        mask = step_mask(supervised, d)
        hidden, top_d = step_teacher(teacher.final, d), shift(top, 1 + d, 0)
        if d > 0:
            rows, anchors = sampled[d - 1]
            if len(anchors) == 0:
                rows, anchors = zero, zero
            normed, hidden = normed[rows, anchors][None], hidden[rows, anchors][None]
            top_d, mask = top_d[rows, anchors][None], mask[rows, anchors][None]
            if len(sampled[d - 1][1]) == 0:
                mask = torch.zeros_like(mask)
        ce, correct, in_vocab = soft_ce(
            normed, hidden, draft_rows, draft_head, draft_ids, t2d, chunk, top=top_d
        )
        trained = in_vocab & mask
        loss_sum = (ce * trained).sum()
        total = total + loss_sum / max(normalizer, 1.0)
        stats.append(
            StepStats(
                float(loss_sum.detach()),
                int(mask.sum()),
                int((correct & trained).sum()),
                int(trained.sum()),
            )
        )
    return total, stats
