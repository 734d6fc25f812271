"""DFlash2 training: DFlash's blocks, anchors, slot targets and weights
(`eyas.drafter.dflash.train`), and a loss of two terms, as speculators 0.9.0 trains it
(`models/dflash2/core.py` `DFlash2DraftModel.forward`, `metrics.py` `compute_metrics`):

- unary: DFlash's slot loss on the drafter's own logits (the target head on its normed
  state); eyas trains the soft cross-entropy against the target's distribution, speculators the
  KL, which differs by the target's entropy (the same gradients);
- selector: at every trained slot, a K-way cross-entropy over the drafter's top-K unary
  candidates rescored by the selector, the label the target's argmax; the predecessor is the
  true token before the slot (teacher forcing: on an accepted path the drafted predecessor is
  that token); a target missing from the top K replaces the K-th candidate, so every slot has
  a label (`selector_training_candidates`). Its weights are the unary term's rule applied to
  its own cross-entropy (`decay`: the same weights; `dpace`: from the selector's confidence).

loss = (sum w_u * CE_unary + alpha * sum w_s * CE_selector) / trained slots.

A slot is correct when the selector's pick among the unary top K (the candidates served: an
injected target does not count) is the target's argmax: what a greedy walk accepts there when
the slots before it were accepted.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from eyas.drafter.dflash.train import slot_targets, slot_weights
from eyas.drafter.dflash2.model import CandidateSelector
from eyas.drafter.loss import StepStats, Teacher


def training_candidates(
    candidates: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(candidates with a missing target in the last place [.., K], the target's place [..],
    whether the unary top K held it [..]) for candidates [.., K] and target ids [..]."""
    match = candidates.eq(target[..., None])
    held = match.any(-1)
    place = torch.where(held, match.long().argmax(-1), candidates.shape[-1] - 1)
    out = candidates.clone()
    out[..., -1] = torch.where(held, out[..., -1], target)
    return out, place, held


def _chunk(
    normed: torch.Tensor,
    teacher_hidden: torch.Tensor,
    predecessors: torch.Tensor,
    head: torch.Tensor,
    selector: CandidateSelector,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(unary soft CE, selector CE, selector correct), each [B, C], for one chunk of slots:
    normed [B, C, H], teacher_hidden [B, C, Ht], predecessors [B, C]."""
    teacher = teacher_hidden.float() @ head.float().t()
    target = teacher.argmax(-1)
    logits = F.linear(normed, head.to(normed.dtype)).float()
    unary = -(torch.softmax(teacher, -1) * F.log_softmax(logits, -1)).sum(-1)
    candidates, place, held = training_candidates(
        logits.detach().topk(selector.top_k, -1).indices, target
    )
    context = selector.context(normed, predecessors)
    scores = logits.gather(-1, candidates) + selector.transitions(context, candidates).float()
    picked = candidates.gather(-1, scores.detach().argmax(-1, keepdim=True))[..., 0]
    ce = F.cross_entropy(scores.flatten(0, 1), place.flatten(), reduction="none")
    return unary, ce.view_as(place), (picked == target) & held


def block_loss(
    states: torch.Tensor,
    teacher: Teacher,
    input_ids: torch.Tensor,
    supervised: torch.Tensor,
    anchors: torch.Tensor,
    valid: torch.Tensor,
    normalizer: float,
    selector: CandidateSelector,
    *,
    selector_alpha: float = 1.0,
    weighting: str = "decay",
    gamma: float = 4.0,
    alpha: float = 0.5,
    chunk: int = 1024,
) -> tuple[torch.Tensor, list[StepStats]]:
    """states: [B, A, bs, H] the drafter's normalised block states. Returns the loss of the
    module docstring and per-slot figures (slots 1..bs-1; `loss_sum` is the unary term's)."""
    b, a, bs, h = states.shape
    pos, mask = slot_targets(supervised, anchors, valid, bs)  # [B, A, S]; pos = a + i - 1
    normed = states[:, :, 1:].reshape(b, a * (bs - 1), h)
    flat = pos.reshape(b, -1)
    teacher_hidden = teacher.final.gather(
        1, flat[..., None].expand(-1, -1, teacher.final.shape[-1])
    )
    predecessors = input_ids.gather(1, flat)  # x_{a+i-1}: the anchor for slot 1
    # a chunk's [B, C, V] logits are kept near 2^26 elements, and recomputed in backward
    step = max(16, min(chunk, (1 << 26) // max(1, b * teacher.head.shape[0])))
    parts = []
    for start in range(0, normed.shape[1], step):
        sl = slice(start, start + step)
        args = (normed[:, sl], teacher_hidden[:, sl], predecessors[:, sl], teacher.head, selector)
        grad = torch.is_grad_enabled() and normed.requires_grad
        parts.append(checkpoint(_chunk, *args, use_reentrant=False) if grad else _chunk(*args))
    unary, ce, correct = (torch.cat([p[i] for p in parts], 1).view(b, a, bs - 1) for i in range(3))
    kw = {"weighting": weighting, "gamma": gamma, "alpha": alpha}
    w_unary = slot_weights(unary.detach(), mask, **kw)
    w_selector = slot_weights(ce.detach(), mask, **kw)
    total = (w_unary * unary * mask).sum() + selector_alpha * (w_selector * ce * mask).sum()
    loss = total / max(normalizer, 1.0)
    stats = [
        StepStats(
            float((unary[..., i] * mask[..., i]).sum().detach()),
            int(mask[..., i].sum()),
            int((correct[..., i] & mask[..., i]).sum()),
            int(mask[..., i].sum()),
        )
        for i in range(bs - 1)
    ]
    return loss, stats
