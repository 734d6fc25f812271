"""Building blocks every drafter method shares: RMSNorm and the SwiGLU MLP (Llama/Qwen3).

Each block's elementwise arithmetic is a plain function (`rms_norm`, `silu_mul`), which the
fast path's `--fast-path compiled` runs through `torch.compile` (`compiled=True`): eagerly an
RMSNorm is a dozen passes over its [T, H] input in forward and backward, with fp32 copies saved
for backward; compiled, a fused kernel each way."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from eyas.drafter import fast_path


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Llama's RMSNorm as transformers writes it: normalised in fp32, rounded to x's dtype,
    then scaled by the weight (an fp32 weight gives an fp32 result)."""
    dtype = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's elementwise part: silu(gate) * up."""
    return F.silu(gate) * up


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, compiled: bool = False) -> torch.Tensor:
        norm = fast_path.compiled(rms_norm, compiled)
        return norm(x, self.weight, self.eps)


class MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor, compiled: bool = False) -> torch.Tensor:
        act = fast_path.compiled(silu_mul, compiled)
        return self.down_proj(act(self.gate_proj(x), self.up_proj(x)))


def split_heads(x: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
    """[B, T, heads*dim] -> [B, heads, T, dim]."""
    b, t, _ = x.shape
    return x.view(b, t, heads, dim).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, heads, T, dim] -> [B, T, heads*dim]."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)
