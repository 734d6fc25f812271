"""Multi-head latent attention (DeepSeek-V2/V3) as a drafter's attention: the shape of the MLA
targets' own layers (Kimi-K2.5, DeepSeek-V3) and of the published 2026 Kimi drafters.

    q   = q_b_proj(q_a_layernorm(q_a_proj(x)))            [h x (nope + rope)]
    c   = kv_a_layernorm(kv_a_proj_with_mqa(x)[:kv_lora])  the cached latent  [kv_lora]
    k_pe = kv_a_proj_with_mqa(x)[kv_lora:]                 one rope key, shared by the heads
    k_nope, v = kv_b_proj(c)                               [h x nope], [h x v]

The rope is DeepSeek's: GPT-J style (interleaved pairs; vLLM `get_rope(..., is_neox_style=
False)`, transformers' `rope_interleave`) on the rope dims only, YaRN frequencies as for every
rope, the cos/sin magnitude `get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)` (vLLM
`DeepseekScalingRotaryEmbedding`) and the softmax scale `(nope + rope)^-0.5 * get_mscale(f,
mscale_all_dim)^2` (vLLM `DeepseekV2MLAAttention`, SGLang `DeepseekV2AttentionMLA`). Exports
therefore carry the target's own `mscale`/`mscale_all_dim` keys, which both engines' DeepSeek
attention reads; `attention_factor` is never written (vLLM 0.32 takes `attention_factor == 1.0`
as `deepseek_llama_scaling`, another rope).

For attention the per-head keys are [k_nope ; k_pe] and the values v, so training runs the
same exact, memory-linear TTT attention as the MHA layer (`eyas.drafter.ttt_attention`); an
engine caches only [c ; k_pe] per token: `kv_bytes_per_token`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from eyas.drafter import fast_path
from eyas.drafter.layers import RMSNorm
from eyas.drafter.rope import check_rope_scaling, inv_freq_and_mscale
from eyas.drafter.ttt_attention import ttt_attention, ttt_attention_fast
from eyas.errors import EyasError
from eyas.hf_models import TargetModel

MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def is_mla_target(target: TargetModel) -> bool:
    """Whether the target's text model is MLA (DeepSeek-V2/V3, Kimi-K2/K2.5)."""
    return bool(target.text.get("kv_lora_rank")) and bool(target.text.get("qk_rope_head_dim"))


@dataclass(frozen=True)
class MLAShape:
    q_lora_rank: int | None  # None: q projected directly (DeepSeek-V2-Lite)
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @classmethod
    def of_target(cls, target: TargetModel) -> MLAShape:
        if not is_mla_target(target):
            raise EyasError(
                "bad_drafter_shape",
                f"--attention mla needs an MLA target (kv_lora_rank, qk_rope_head_dim in its "
                f"config); {target.dir} has a {target.text_model_type} text model without them",
            )
        t = target.text
        return cls(
            int(t["q_lora_rank"]) if t.get("q_lora_rank") else None,
            int(t["kv_lora_rank"]),
            int(t["qk_nope_head_dim"]),
            int(t["qk_rope_head_dim"]),
            int(t["v_head_dim"]),
        )


def kv_bytes_per_token(cfg: Any, dtype_bytes: int = 2) -> int:
    """Draft KV cache per token, as an engine keeps it: MLA caches the latent and the rope key
    ([kv_lora + rope], vLLM `MLAAttention`'s one-entry-per-token cache); MHA caches k and v for
    every kv head."""
    if getattr(cfg, "attention", "mha") == "mla":
        return (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * dtype_bytes
    return 2 * cfg.num_key_value_heads * cfg.head_dim * dtype_bytes


def _get_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_scales(scaling: dict[str, Any] | None) -> tuple[float, float]:
    """(cos/sin magnitude, softmax-scale factor) of DeepSeek's YaRN (module docstring); (1, 1)
    for plain rope. `mscale` defaults to 1 and `mscale_all_dim` to 0 as in vLLM and SGLang."""
    scaling = check_rope_scaling(scaling)
    if scaling is None:
        return 1.0, 1.0
    f = float(scaling["factor"])
    m = float(scaling.get("mscale", 1.0) or 0.0)
    m_all = float(scaling.get("mscale_all_dim", 0.0) or 0.0)
    return _get_mscale(f, m) / _get_mscale(f, m_all), _get_mscale(f, m_all) ** 2


class InterleavedRotary(nn.Module):
    """GPT-J-style rope (pairs x[2i], x[2i+1]) with DeepSeek's magnitude; `inv_freq` and
    `mscale` as `rope.Rotary` names them (the engine-parity harness reads both)."""

    def __init__(self, dim: int, theta: float, scaling: dict[str, Any] | None):
        super().__init__()
        inv_freq, _ = inv_freq_and_mscale(dim, theta, scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.mscale, _ = deepseek_scales(scaling)

    def rotate(self, x: torch.Tensor, positions: torch.Tensor, compiled: bool = False):
        """x: [B, h, T, d]; positions: [T] or [B, T]. `compiled`: the rotation's arithmetic
        through `torch.compile` (`--fast-path compiled`)."""
        angles = positions.float()[..., None] * self.inv_freq.to(x.device)  # [.., T, d/2]
        cos, sin = angles.cos() * self.mscale, angles.sin() * self.mscale
        if positions.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]
        return fast_path.compiled(rotate_pairs, compiled)(x, cos, sin)


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The interleaved (GPT-J) rotation of x [.., d] by cos, sin [.., d/2], in fp32."""
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    return out.flatten(-2).to(x.dtype)


class MLAAttention(nn.Module):
    """The DeepSeek-V3 attention over the EAGLE-3 layer's [embed ; hidden] input (2H wide),
    with the `Attention` interface of `eagle3.model` (`project`, `output`, `forward`,
    `cached`). Tensor names are DeepSeek's, which vLLM's and SGLang's draft classes load."""

    def __init__(self, cfg: Any, in_dim: int):
        super().__init__()
        h = cfg.num_attention_heads
        self.h, self.nope, self.rope = h, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim
        self.vd, self.kv_lora, self.q_lora = cfg.v_head_dim, cfg.kv_lora_rank, cfg.q_lora_rank
        qk = self.nope + self.rope
        if self.q_lora:
            self.q_a_proj = nn.Linear(in_dim, self.q_lora, bias=False)
            self.q_a_layernorm = RMSNorm(self.q_lora, cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(self.q_lora, h * qk, bias=False)
        else:
            self.q_proj = nn.Linear(in_dim, h * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(in_dim, self.kv_lora + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_lora, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(self.kv_lora, h * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(h * self.vd, cfg.hidden_size, bias=False)
        self.rotary = InterleavedRotary(self.rope, cfg.rope_theta, cfg.rope_scaling)
        self.scale = qk**-0.5 * deepseek_scales(cfg.rope_scaling)[1]

    def project(self, x: torch.Tensor, positions: torch.Tensor, compiled: bool = False):
        """q, k: [B, h, T, nope + rope]; v: [B, h, T, v_head_dim]. `compiled`: the norms and
        the rotation through `torch.compile` (`--fast-path compiled`)."""
        b, t, _ = x.shape
        qk = self.nope + self.rope
        if self.q_lora:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x), compiled=compiled))
        else:
            q = self.q_proj(x)
        q = q.view(b, t, self.h, qk).transpose(1, 2)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora, self.rope], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent, compiled=compiled))
        kv = kv.view(b, t, self.h, self.nope + self.vd)
        k_nope, v = kv.transpose(1, 2).split([self.nope, self.vd], -1)
        rotate = self.rotary.rotate
        k_pe = rotate(k_pe[:, None], positions, compiled)  # [B, 1, T, rope]: one per token
        q = torch.cat([q[..., : self.nope], rotate(q[..., self.nope :], positions, compiled)], -1)
        k = torch.cat([k_nope, k_pe.expand(b, self.h, t, self.rope)], -1)
        return q, k, v

    def output(self, out: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.vd))

    def forward(self, x, positions, cache: list[tuple[torch.Tensor, torch.Tensor]], fast=False):
        """TTT attention as `eagle3.model.Attention.forward`: (output, k, v); the caller keeps
        k, v (the list is only read)."""
        compiled = fast == "compiled"
        q, k, v = self.project(x, positions, compiled)
        steps = [*cache, (k, v)]
        k0, v0 = steps[0]
        if fast:
            out = ttt_attention_fast(q, k0, v0, steps[1:], self.scale, compiled=compiled)
        else:
            out = ttt_attention(q, k0, v0, steps[1:], self.scale)
        return self.output(out), k, v

    def cached(self, x, positions, past_k, past_v, mask):
        q, k, v = self.project(x, positions)
        keys = k if past_k is None else torch.cat([past_k, k], 2)
        values = v if past_v is None else torch.cat([past_v, v], 2)
        out = torch.nn.functional.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, scale=self.scale
        )
        return self.output(out), k, v
