"""Building blocks every drafter method shares: RMSNorm and the SwiGLU MLP (Llama/Qwen3)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class MLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def split_heads(x: torch.Tensor, heads: int, dim: int) -> torch.Tensor:
    """[B, T, heads*dim] -> [B, heads, T, dim]."""
    b, t, _ = x.shape
    return x.view(b, t, heads, dim).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[B, heads, T, dim] -> [B, T, heads*dim]."""
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)
