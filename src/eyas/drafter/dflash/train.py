"""DFlash training: anchor sampling, the mask-token blocks, and the loss.

Alignment, in one place (speculators `src/speculators/models/dflash/core.py`
`_backbone_forward`, `attention.py` `create_anchor_block_mask_mod`, `utils.py`
`select_anchors`). For a sequence x_0..x_{N-1} with `supervised[k]` = 1 iff x_k is trained:

- an anchor is a position a with x_a supervised (a generated token: at decode time the anchor
  is the target's bonus token) and 1 <= a <= N-2; up to `max_anchors` of them are drawn
  uniformly without replacement, from a generator seeded per sequence and batch position, so
  the batch is the same on any number of ranks and after a resume;
- its block is [x_a, mask x (bs-1)] at positions a..a+bs-1, seeing the target states of
  positions < a and the whole block;
- slot i >= 1 predicts x_{a+i}: its teacher is the target's distribution at position a+i-1, its
  mask supervised[a+i] (and a+i < N); slot 0 is not trained.

Weighting of slot i (loss = Σ w · soft-CE over trained slots / their count, as speculators
`losses/utils.py` `loss_function` normalises):
- `decay` (the paper, speculators `dflash_loss_decay`): w_i = exp(-(i-1)/gamma);
- `dpace` (D-PACE, arXiv 2605.18810; speculators `dpace_loss_decay`): with q_i = exp(-CE_i) the
  drafter's confidence, s_i = (1-alpha) q_i + alpha on trained slots (1 elsewhere) and
  P_i = Π_{j<=i} s_j, w_i = Σ_{j>=i} P_j·m_j, weights computed without gradient: a slot is
  worth the expected acceptance it can still unlock.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from eyas.drafter.fused_loss import frozen_head_soft_ce, head_chunks
from eyas.drafter.loss import StepStats, Teacher, resolved, soft_ce


def select_anchors(
    supervised: torch.Tensor, lengths: list[int], max_anchors: int, seeds: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(anchors [B, A] long, valid [B, A] bool), A the most any row has (>= 1); sorted per row."""
    rows = []
    for r, (n, seed) in enumerate(zip(lengths, seeds)):
        sup = supervised[r, :n].bool().cpu()
        sup[0] = False
        sup[max(n - 1, 0) :] = False  # an anchor needs one position after it
        candidates = sup.nonzero().flatten()
        gen = torch.Generator().manual_seed(seed)
        pick = candidates[torch.randperm(len(candidates), generator=gen)[:max_anchors]]
        rows.append(torch.sort(pick).values)
    # at least one (padding) anchor: a row or rank with nothing to train still runs the layers,
    # so its zero loss is part of the graph (DDP's collective backward needs every rank's)
    width = max(1, max((len(p) for p in rows), default=0))
    anchors = torch.zeros(len(rows), width, dtype=torch.long)
    valid = torch.zeros(len(rows), width, dtype=torch.bool)
    for r, pick in enumerate(rows):
        anchors[r, : len(pick)] = pick
        valid[r, : len(pick)] = True
    return anchors.to(supervised.device), valid.to(supervised.device)


def slot_targets(
    supervised: torch.Tensor, anchors: torch.Tensor, valid: torch.Tensor, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(teacher positions [B, A, bs-1], trained mask [B, A, bs-1]) of slots 1..bs-1."""
    t = supervised.shape[1]
    pos = anchors[..., None] + torch.arange(1, block_size, device=anchors.device)  # a + i
    inside = pos < t
    clamped = pos.clamp(max=t - 1)
    sup = supervised.bool().gather(1, clamped.flatten(1)).view_as(pos)
    return (pos - 1).clamp(max=t - 1), sup & inside & valid[..., None]


def slot_weights(
    ce: torch.Tensor, mask: torch.Tensor, *, weighting: str, gamma: float, alpha: float
) -> torch.Tensor:
    """[B, A, S] weights of slots 1..S (see the module docstring); no gradient."""
    with torch.no_grad():
        s = ce.shape[-1]
        if weighting == "decay":
            w = torch.exp(-torch.arange(s, device=ce.device, dtype=torch.float32) / gamma)
            return w.expand_as(ce) * mask
        m = mask.float()
        smooth = torch.where(mask, (1 - alpha) * torch.exp(-ce.float()) + alpha, 1.0)
        prefix = torch.cumprod(smooth, -1)
        suffix = torch.flip(torch.cumsum(torch.flip(prefix * m, [-1]), -1), [-1])
        return suffix * m


def block_loss(
    states: torch.Tensor,
    teacher: Teacher,
    supervised: torch.Tensor,
    anchors: torch.Tensor,
    valid: torch.Tensor,
    normalizer: float,
    *,
    weighting: str = "decay",
    gamma: float = 4.0,
    alpha: float = 0.5,
    chunk: int = 1024,
    fast: bool = False,
    compiled: bool = False,
) -> tuple[torch.Tensor, list[StepStats]]:
    """states: [B, A, bs, H] the drafter's normalised block states (its head is the target's).
    Returns Σ w·CE / normalizer and per-slot figures (slots 1..bs-1). `fast`: the same figures
    from `fused_loss.frozen_head_soft_ce` (each teacher position computed once, the gradient
    in forward, the figures left on the device); `compiled`: its arithmetic compiled."""
    b, a, bs, h = states.shape
    pos, mask = slot_targets(supervised, anchors, valid, bs)  # [B, A, S]
    normed = states[:, :, 1:].reshape(b, a * (bs - 1), h)
    teacher_hidden = teacher.final.gather(
        1, pos.reshape(b, -1, 1).expand(-1, -1, teacher.final.shape[-1])
    )
    head = teacher.head

    def draft_head(x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, head.to(x.dtype))

    vocab = head.shape[0]
    if fast:
        ce, correct = frozen_head_soft_ce(
            normed, head.detach(), head_chunks(teacher_hidden, head), None, chunk, compiled
        )
    else:
        ce, correct, _ = soft_ce(
            normed,
            teacher_hidden,
            head,
            draft_head,
            torch.arange(vocab, device=head.device),
            torch.ones(vocab, dtype=torch.bool, device=head.device),
            chunk,
        )
    ce, correct = ce.view(b, a, bs - 1), correct.view(b, a, bs - 1)
    w = slot_weights(ce.detach(), mask, weighting=weighting, gamma=gamma, alpha=alpha)
    loss = (w * ce * mask).sum() / max(normalizer, 1.0)
    stats = [
        StepStats(
            (ce[..., i] * mask[..., i]).sum().detach(),
            mask[..., i].sum(),
            (correct[..., i] & mask[..., i]).sum(),
            mask[..., i].sum(),
        )
        for i in range(bs - 1)
    ]
    return loss, stats if fast else resolved(stats)
