"""The DFlash2 draft model: DFlash's block drafter (`eyas.drafter.dflash.model`) with two
modules more, as z-lab's DFlash2 (pinned by speculators' `models/dflash2/model_definitions.py`)
and the engines (vLLM `model_executor/models/qwen3_dflash2.py`, SGLang `srt/models/dflash.py`)
define them:

    layers.{i}.attention_conv,  a grouped dynamic causal convolution around each sublayer:
    layers.{i}.mlp_conv         `prepare` convolves the sublayer's (normed) input, `finish` its
                                output, both kernels from one projection of that input:
                                out[j, c] = sum_t (base[t, c] + delta[j, t, g(c)]) * x[j - t, c]
                                with taps that never cross a block's start (position in the
                                block >= t). base_kernel [2 (in, out), taps, H];
                                kernel_projection H -> 2 * taps * (H / group). Initialised as
                                the identity (base tap 0 = 1, the rest and the projection 0):
                                a fresh DFlash2 computes what DFlash does.
    candidate_selector          predecessor_codebook, successor_codebook [V, rank] and
                                hidden_projection H -> rank. It rescores slot j's top-K
                                candidates c of the target head by
                                unary[c] + <A[p] * proj(h_j), B[c]>, p the token before slot j
                                (the anchor for slot 1), so drafting walks a path through the
                                candidates instead of taking each slot's argmax.

The attention, its mask, the context's keys and values, the norms and the target's frozen
embedding and head are DFlash's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from eyas.drafter.dflash.model import DFlashConfig, DFlashDrafter, DFlashLayer


@dataclass
class DFlash2Config(DFlashConfig):
    conv_kernel_size: int = 2
    conv_group_size: int = 16
    selector_rank: int = 256
    selector_top_k: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.hidden_size % self.conv_group_size:
            raise ValueError(
                f"conv_group_size {self.conv_group_size} must divide hidden_size {self.hidden_size}"
            )
        if not 1 <= self.conv_kernel_size <= self.block_size:
            raise ValueError(
                f"conv_kernel_size {self.conv_kernel_size} must be in 1..block_size "
                f"({self.block_size})"
            )
        if not 1 <= self.selector_top_k <= self.vocab_size:
            raise ValueError(f"selector_top_k {self.selector_top_k} must be in 1..vocab_size")

    @property
    def method(self) -> str:
        return "dflash2"


def grouped_conv(
    x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, block_size: int
) -> torch.Tensor:
    """x [B, Q, H] (Q rows of whole blocks, or one block's first Q rows); delta
    [B, Q, taps, G] the per-row kernel; base [taps, H]. Row j's position in its block is
    j % block_size; a tap t reaches row j - t only inside the block."""
    b, q, h = x.shape
    taps, groups = delta.shape[-2:]
    rows = x.view(b, q, groups, h // groups)
    inside = torch.arange(q, device=x.device) % block_size
    out = torch.zeros_like(rows)
    for tap in range(min(taps, q)):
        shifted = rows if tap == 0 else F.pad(rows[:, : q - tap], (0, 0, 0, 0, tap, 0))
        coefficient = base[tap].to(rows.dtype).view(groups, -1) + delta[:, :, tap, :, None]
        out = out + shifted * coefficient * (inside >= tap).view(1, q, 1, 1)
    return out.view(b, q, h)


class GroupedDynamicConv(nn.Module):
    """One sublayer's pair of convolutions (see the module docstring)."""

    def __init__(self, cfg: DFlash2Config):
        super().__init__()
        self.block_size = cfg.block_size
        self.taps = cfg.conv_kernel_size
        self.groups = cfg.hidden_size // cfg.conv_group_size
        self.base_kernel = nn.Parameter(torch.zeros(2, self.taps, cfg.hidden_size))
        self.kernel_projection = nn.Linear(cfg.hidden_size, 2 * self.taps * self.groups, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The identity on both sides: DFlash's sublayer, unchanged."""
        with torch.no_grad():
            self.base_kernel.zero_()
            self.base_kernel[:, 0] = 1.0
            self.kernel_projection.weight.zero_()

    def prepare(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x convolved with the input-side kernel, the output-side kernel for `finish`)."""
        kernels = self.kernel_projection(x).view(*x.shape[:-1], 2, self.taps, self.groups)
        return grouped_conv(x, kernels[..., 0, :, :], self.base_kernel[0], self.block_size), (
            kernels[..., 1, :, :]
        )

    def finish(self, x: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        return grouped_conv(x, delta, self.base_kernel[1], self.block_size)


class DFlash2Layer(DFlashLayer):
    def __init__(self, cfg: DFlash2Config):
        super().__init__(cfg)
        self.attention_conv = GroupedDynamicConv(cfg)
        self.mlp_conv = GroupedDynamicConv(cfg)

    def forward(self, h, positions, *, kv=None, context=None, context_positions=None, groups=None):
        """DFlash's layer with each sublayer between `prepare` and `finish`; the context's keys
        and values are projected from the context itself, unconvolved."""
        if kv is None:
            kv = self.self_attn.keys_values(context, context_positions)
        x, delta = self.attention_conv.prepare(self.input_layernorm(h))
        h = h + self.attention_conv.finish(self.self_attn(x, positions, *kv, groups), delta)
        x, delta = self.mlp_conv.prepare(self.post_attention_layernorm(h))
        return h + self.mlp_conv.finish(self.mlp(x), delta)


class CandidateSelector(nn.Module):
    """The bilinear transition score of a (predecessor, candidate) pair at a slot."""

    def __init__(self, cfg: DFlash2Config, initializer_range: float = 0.02):
        super().__init__()
        self.top_k = cfg.selector_top_k
        self.predecessor_codebook = nn.Parameter(torch.empty(cfg.vocab_size, cfg.selector_rank))
        self.successor_codebook = nn.Parameter(torch.empty(cfg.vocab_size, cfg.selector_rank))
        self.hidden_projection = nn.Linear(cfg.hidden_size, cfg.selector_rank, bias=False)
        for p in self.parameters():  # z-lab's and speculators' init
            nn.init.normal_(p, std=initializer_range)

    def context(self, hidden: torch.Tensor, predecessors: torch.Tensor) -> torch.Tensor:
        """[..., rank]: A[p] * proj(h) for hidden [..., H] and predecessor ids [...]."""
        return self.predecessor_codebook[predecessors] * self.hidden_projection(hidden)

    def transitions(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """[..., K]: <context, B[c]> for context [..., rank] and candidate ids [..., K]."""
        return (context.unsqueeze(-2) * self.successor_codebook[candidates]).sum(-1)

    def edges(
        self, hidden: torch.Tensor, unary: torch.Tensor, candidates: torch.Tensor, anchor: int
    ) -> torch.Tensor:
        """Decoding: [L, K (predecessor), K (candidate)] scores of one block's L drafted slots,
        hidden [L, H], unary and candidates [L, K]: slot 1's predecessor is the anchor, slot
        j's each of slot j-1's candidates (vLLM and SGLang `_score_edges`)."""
        k = candidates.shape[-1]
        predecessors = torch.cat(
            [torch.full((1, k), anchor, device=candidates.device), candidates[:-1]], 0
        )
        context = self.predecessor_codebook[predecessors] * self.hidden_projection(hidden)[:, None]
        return unary[:, None] + torch.einsum(
            "lpr,lcr->lpc", context, self.successor_codebook[candidates]
        )


class DFlash2Drafter(DFlashDrafter):
    method = "dflash2"
    layer_cls = DFlash2Layer

    def __init__(self, cfg: DFlash2Config):
        super().__init__(cfg)
        self.candidate_selector = CandidateSelector(cfg)
