"""The drafter's rotary embedding: plain RoPE or YaRN, and the rope keys every engine reads alike.

A drafter's positions are the target's positions, so its rope scaling follows the target's
(`TargetModel.rope_scaling`: YaRN x64 over 4096 positions for Kimi-K2.5). The frequencies are
the same YaRN maths everywhere (transformers `modeling_rope_utils._compute_yarn_parameters`, vLLM
`model_executor/layers/rotary_embedding/yarn_scaling_rope.py`, SGLang
`srt/layers/rotary_embedding/yarn.py` or, up to 0.5.11, `srt/layers/rotary_embedding.py`):

    inv_freq = interp * (1 - m) + extrap * m,  m = 1 - ramp(low, high)   (per frequency pair)
    low, high = floor/ceil of d * ln(L0 / (beta * 2 pi)) / (2 ln theta) for beta_fast, beta_slow

The *magnitude* (cos and sin are multiplied by it, so attention logits by its square) is not:

    transformers, vLLM >= 0.30   attention_factor, else get_mscale(f, mscale) /
                                 get_mscale(f, mscale_all_dim) when both are set, else
                                 get_mscale(f); `attn_factor` is not read
    vLLM <= 0.28                 get_mscale(f) * attn_factor (mscale keys and attention_factor
                                 are not passed by `get_rope`)
    SGLang <= 0.5.15             get_mscale(f) * attn_factor (likewise)
    SGLang >= 0.5.16             (the mscale ratio when both keys are set, else get_mscale(f))
                                 * attn_factor; attention_factor is not read
    get_mscale(s, m) = 0.1 m ln s + 1

For Kimi-K2.5's `mscale: 1, mscale_all_dim: 1` at factor 64 that is 1.0 on the first and last
rows and 1.416 on the middle two (vLLM issue #48621): the same config is served attention logits
2x sharper on an older engine. eyas trains with transformers' magnitude and writes exports in the
one form all four read alike (`portable_rope_scaling`): no `mscale`/`mscale_all_dim`, and both
`attention_factor = M` and `attn_factor = M / get_mscale(f)`, so every rule above gives M.
(`engine_magnitudes` restates each rule; the tests run the engines' own code against it.)

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
    if float(scaling.get("extrapolation_factor", 1.0)) != 1.0:
        # read by SGLang and vLLM <= 0.28 only: no rope all engines serve alike
        raise EyasError("unsupported_rope_scaling", "yarn with extrapolation_factor != 1")
    return scaling


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _correction_dim(rotations: float, dim: int, base: float, max_pos: int) -> float:
    return (dim * math.log(max_pos / (rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_magnitude(scaling: dict[str, Any]) -> float:
    """The cos/sin magnitude eyas trains with: transformers' (`attention_factor`, else the
    `mscale` ratio, else get_mscale(f)), times `attn_factor` when the config has no
    `attention_factor` (a config written for SGLang or an older vLLM, the engines that read it).
    For eyas's own exports (`portable_rope_scaling`) every engine gives this value."""
    factor = float(scaling["factor"])
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        base = _yarn_mscale(factor, float(scaling["mscale"])) / _yarn_mscale(
            factor, float(scaling["mscale_all_dim"])
        )
    else:
        base = _yarn_mscale(factor)
    return float(base * float(scaling.get("attn_factor", 1.0)))


def engine_magnitudes(scaling: dict[str, Any]) -> dict[str, float]:
    """The magnitude each engine rule (module docstring) computes for a YaRN config."""
    f = float(scaling["factor"])
    simple = _yarn_mscale(f)
    attn = float(scaling.get("attn_factor", 1.0))
    m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if scaling.get("attention_factor") is not None:
        hf = float(scaling["attention_factor"])
    elif m and m_all:
        hf = _yarn_mscale(f, float(m)) / _yarn_mscale(f, float(m_all))
    else:
        hf = simple
    sglang_new = (
        _yarn_mscale(f, float(m)) / _yarn_mscale(f, float(m_all))
        if m is not None and m_all is not None
        else simple
    )
    return {
        "transformers": hf,
        "vllm>=0.30": hf,
        "vllm<=0.28": simple * attn,
        "sglang<=0.5.15": simple * attn,
        "sglang>=0.5.16": sglang_new * attn,
    }


def portable_rope_scaling(scaling: dict[str, Any] | None) -> dict[str, Any] | None:
    """`scaling` rewritten so that every engine computes the frequencies and the magnitude eyas
    trained with (module docstring): the `mscale` pair replaced by `attention_factor` and
    `attn_factor`."""
    scaling = check_rope_scaling(scaling)
    if scaling is None:
        return None
    magnitude = yarn_magnitude(scaling)
    out = {k: v for k, v in scaling.items() if k not in ("mscale", "mscale_all_dim", "type")}
    out["attention_factor"] = magnitude
    out["attn_factor"] = magnitude / _yarn_mscale(float(scaling["factor"]))
    return out


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
    return inv_freq, yarn_magnitude(scaling)


class Rotary(torch.nn.Module):
    """cos/sin for arbitrary positions; `rotate(x, positions)` rotates [B, h, T, d]."""

    def __init__(self, head_dim: int, theta: float, scaling: dict[str, Any] | None = None):
        super().__init__()
        inv_freq, mscale = inv_freq_and_mscale(head_dim, theta, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mscale = mscale

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, compiled: bool = False):
        """x: [B, h, T, d]; positions: [T] (shared by the batch) or [B, T]. `compiled`: the
        rotation's arithmetic through `torch.compile` (`--fast-path compiled`)."""
        angles = positions.float()[..., None] * self.inv_freq.to(x.device)  # [.., T, d/2]
        cos = (angles.cos() * self.mscale).repeat(*([1] * (angles.dim() - 1)), 2).to(x.dtype)
        sin = (angles.sin() * self.mscale).repeat(*([1] * (angles.dim() - 1)), 2).to(x.dtype)
        if positions.dim() == 2:  # [B, T, d] -> [B, 1, T, d]
            cos, sin = cos[:, None], sin[:, None]
        from eyas.drafter import fast_path

        return fast_path.compiled(rotate_half, compiled)(x, cos, sin)


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The half-split (neox) rotation of x [.., d] by cos, sin [.., d] (each half repeated)."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rope_config_fields(theta: float, scaling: dict[str, Any] | None) -> dict[str, Any]:
    """The keys a Llama/Qwen3-layer config carries for this rope, read alike by every engine:
    `rope_theta` and `rope_scaling` in its portable form (`portable_rope_scaling`). SGLang's
    layers read `config.rope_scaling` (transformers 5 aliases it to `rope_parameters`); vLLM's
    config loader standardises the pair into `rope_parameters`. `rope_parameters` is not
    written beside them: transformers 5 given both drops `rope_theta`."""
    fields: dict[str, Any] = {"rope_theta": float(theta)}
    portable = portable_rope_scaling(scaling)
    if portable is not None:
        fields["rope_scaling"] = portable
    return fields


def read_rope_fields(layer: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from a Llama-layer config in either spelling."""
    params = dict(layer.get("rope_parameters") or {})
    theta = layer.get("rope_theta") or params.get("rope_theta") or 10000.0
    scaling = layer.get("rope_scaling") or {k: v for k, v in params.items() if k != "rope_theta"}
    return float(theta), check_rope_scaling(scaling or None)
