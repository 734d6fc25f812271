"""The drafter's attention shape, derived from the target it serves.

A drafter copies the target's hidden size (its embedding and head are the target's) and, by
default, its attention heads. Its head dimension is the target's `hidden / heads` only when
that is a size the engines' attention kernels are built for; otherwise it is 128, the size
every MHA backend on Hopper and Blackwell ships. FlashAttention-3, FlashInfer and TRT-LLM all
instantiate head dims 64, 128 and 256 (FlashInfer has no kernel for 112); 32, which
FlashAttention-2 and PyTorch SDPA serve, is kept for toy-size targets. The q/k/v projections
then map 2H (EAGLE-3) or H (DFlash) to heads x 128, which need not equal H.

Kimi-K2.5 (DeepSeek-V3 text model, hidden 7168, 64 heads) gives 7168 / 64 = 112: its drafter
gets 64 heads x 128, the shape of the published `lightseekorg/kimi-k2.5-eagle3` (config.json:
`num_attention_heads` 64, `head_dim` 128, `intermediate_size` 12288). That MoE target's
`intermediate_size` (18432) is its one dense layer's, not a width a one-layer drafter needs;
the published drafter's 12288 is kept as an exact-match preset below (looked up by text model
type and hidden size, never fuzzily). Every value can be set explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass

from eyas.hf_models import TargetModel

KERNEL_HEAD_DIMS = (32, 64, 128, 256)
DEFAULT_HEAD_DIM = 128

# Published drafter shapes, by (text model_type, hidden_size) of the target: the Llama-layer
# EAGLE-3 drafter lightseekorg/kimi-k2.5-eagle3 (64 heads x 128, intermediate 12288; its
# config.json as issue 23 quotes it: no hub download from here).
PUBLISHED_INTERMEDIATE = {
    ("kimi_k2", 7168): 12288,
    ("deepseek_v3", 7168): 12288,
}


@dataclass(frozen=True)
class AttentionShape:
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    why: str


def drafter_shape(
    target: TargetModel,
    *,
    num_attention_heads: int | None = None,
    num_key_value_heads: int | None = None,
    head_dim: int | None = None,
    intermediate_size: int | None = None,
) -> AttentionShape:
    """Heads, kv heads, head dim and MLP width for a drafter of `target` (explicit values win)."""
    heads = num_attention_heads or target.num_attention_heads
    kv = num_key_value_heads or (
        target.num_key_value_heads if heads == target.num_attention_heads else heads
    )
    natural = target.hidden_size // heads if target.hidden_size % heads == 0 else 0
    reasons = []
    if head_dim:
        dim = head_dim
        reasons.append(f"head_dim {dim} as configured")
    elif natural in KERNEL_HEAD_DIMS:
        dim = natural
        reasons.append(f"head_dim {dim} = hidden {target.hidden_size} / {heads} heads")
    else:
        dim = DEFAULT_HEAD_DIM
        reasons.append(
            f"head_dim {dim}: hidden {target.hidden_size} / {heads} heads = "
            f"{target.hidden_size / heads:g} is not one of the kernels' {KERNEL_HEAD_DIMS}"
        )
    preset = PUBLISHED_INTERMEDIATE.get((target.text_model_type or "", target.hidden_size))
    if intermediate_size:
        inter = intermediate_size
        reasons.append(f"intermediate {inter} as configured")
    elif preset:
        inter = preset
        reasons.append(f"intermediate {inter}: the published drafter for this target")
    else:
        inter = target.intermediate_size
        reasons.append(f"intermediate {inter} = the target's")
    if heads % kv:
        from eyas.errors import EyasError

        raise EyasError("bad_drafter_shape", f"{heads} heads are not a multiple of {kv} kv heads")
    return AttentionShape(heads, kv, dim, inter, "; ".join(reasons))
