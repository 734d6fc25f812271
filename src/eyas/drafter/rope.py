"""The drafter's rotary embedding: plain RoPE or YaRN, the way the engines serve it.

A drafter's positions are the target's positions, so its rope scaling follows the target's
(`TargetModel.rope_scaling`: YaRN x64 over 4096 positions for Kimi-K2.5). Both engines build a
Llama drafter's rope from the config's `rope_theta` and `rope_scaling` with the same YaRN
maths: vLLM `vllm/model_executor/layers/rotary_embedding/__init__.py` `get_rope` (`"yarn"` ->
`yarn_scaling_rope.py` `YaRNScalingRotaryEmbedding`, helpers in `common.py`) and SGLang
`python/sglang/srt/layers/rotary_embedding.py` (the same class, adapted from vLLM). This module
implements that maths, so a drafter trains and decodes with the rotation it is served with:

    inv_freq = interp * (1 - m) + extrap * m,  m = 1 - ramp(low, high)   (per frequency pair)
    low, high = floor/ceil of d * ln(L0 / (beta * 2 pi)) / (2 ln theta) for beta_fast, beta_slow
    cos, sin scaled by mscale = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
    (or get_mscale(factor) when those are not both given), get_mscale(s, m) = 0.1 m ln s + 1

Layout: Llama half-split (neox style), as both engines default to.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from eyas.errors import EyasError

SUPPORTED_ROPE_TYPES = ("default", "yarn")


def check_rope_scaling(scaling: dict[str, Any] | None) -> dict[str, Any] | None:
    """The scaling dict normalised (`rope_type`), or a clear error for a type eyas does not
    implement (training with another rotation than the one served would lose acceptance
    silently)."""
    if not scaling:
        return None
    scaling = dict(scaling)
    kind = scaling.pop("type", None) or scaling.get("rope_type") or "default"
    scaling["rope_type"] = kind
    if kind == "default":
        return None
    if kind not in SUPPORTED_ROPE_TYPES:
        raise EyasError(
            "unsupported_rope_scaling",
            f"rope scaling {kind!r}: the drafter implements {SUPPORTED_ROPE_TYPES}",
        )
    for key in ("factor", "original_max_position_embeddings"):
        if key not in scaling:
            raise EyasError("unsupported_rope_scaling", f"yarn rope scaling without {key}")
    return scaling


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _correction_dim(rotations: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (rotations * 2 * math.pi))) / (2 * math.log(base))


def inv_freq_and_mscale(
    head_dim: int, theta: float, scaling: dict[str, Any] | None
) -> tuple[torch.Tensor, float]:
    """([head_dim / 2] inverse frequencies, cos/sin magnitude) for plain RoPE or YaRN."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    pos_freqs = theta**exponents
    extrap = 1.0 / pos_freqs
    scaling = check_rope_scaling(scaling)
    if scaling is None:
        return extrap, 1.0
    factor = float(scaling["factor"])
    original = int(scaling["original_max_position_embeddings"])
    beta_fast = float(scaling.get("beta_fast", 32))
    beta_slow = float(scaling.get("beta_slow", 1))
    low = _correction_dim(beta_fast, head_dim, theta, original)
    high = _correction_dim(beta_slow, head_dim, theta, original)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # as the engines do: no division by zero
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (high frequencies), 0: interpolate
    inv_freq = (extrap / factor) * (1 - keep) + extrap * keep
    if scaling.get("attention_factor") is not None:
        mscale = float(scaling["attention_factor"])
    elif scaling.get("mscale") and scaling.get("mscale_all_dim"):
        mscale = _yarn_mscale(factor, float(scaling["mscale"])) / _yarn_mscale(
            factor, float(scaling["mscale_all_dim"])
        )
    else:
        mscale = _yarn_mscale(factor)
    return inv_freq, float(mscale)


class Rotary(torch.nn.Module):
    """cos/sin for arbitrary positions; `rotate(x, positions)` rotates [B, h, T, d]."""

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None = None):
        super().__init__()
        inv_freq, mscale = inv_freq_and_mscale(head_dim, theta, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mscale = mscale

    def rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [B, h, T, d]; positions: [T] (shared by the batch) or [B, T]."""
        d = x.shape[-1]
        angles = positions.float()[..., None] * self.inv_freq.to(x.device)  # [.., T, d/2]
        cos = (angles.cos() * self.mscale).repeat(*([1] * (angles.dim() - 1)), 2).to(x.dtype)
        sin = (angles.sin() * self.mscale).repeat(*([1] * (angles.dim() - 1)), 2).to(x.dtype)
        if positions.dim() == 2:  # [B, T, d] -> [B, 1, T, d]
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin


def rope_config_fields(theta: float, scaling: dict[str, Any] | None) -> dict[str, Any]:
    """The keys a Llama-layer config carries for this rope, as both engines read them:
    `rope_theta` and `rope_scaling` (SGLang `LlamaDecoderLayer`: `getattr(config,
    "rope_scaling", None)`; transformers 5, which vLLM's config loader uses, standardises the
    pair into `rope_parameters`). `rope_parameters` is not written beside them: transformers 5
    given both drops `rope_theta`."""
    fields: dict[str, Any] = {"rope_theta": float(theta)}
    scaling = check_rope_scaling(scaling)
    if scaling is not None:
        fields["rope_scaling"] = scaling
    return fields


def read_rope_fields(layer: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from a Llama-layer config in either spelling."""
    params = dict(layer.get("rope_parameters") or {})
    theta = layer.get("rope_theta") or params.get("rope_theta") or 10000.0
    scaling = layer.get("rope_scaling") or {k: v for k, v in params.items() if k != "rope_theta"}
    return float(theta), check_rope_scaling(scaling or None)
