"""DFlash layouts: the speculators `dflash` config vLLM loads (`--format vllm`) and z-lab's own
`DFlashDraftModel` config that SGLang loads (`--format sglang`; vLLM loads it too), written
from a trained drafter and read back from anyone's export (`eyas.backends.*.conventions` cite
the engine code for every key).

Neither ships the embedding or the head: both are the target's (SGLang's `DFlashDraftModel`
has none; vLLM shares the target's when absent). The drafter's hidden size is the target's.
"""

from __future__ import annotations

from typing import Any

from eyas import __version__
from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.dflash.model import DFlashConfig
from eyas.drafter.method import DrafterLoadError
from eyas.drafter.rope import read_rope_fields, rope_config_fields
from eyas.hf_models import TargetModel

# the target's, read from the target by the engines and by eyas's loader
NOT_EXPORTED = ("embed_tokens.weight", "lm_head.weight")


def qwen3_fields(d: DFlashConfig, target: TargetModel | None) -> dict[str, Any]:
    fields = {
        "model_type": "qwen3",
        "num_hidden_layers": d.num_hidden_layers,
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_attention_heads": d.num_attention_heads,
        "num_key_value_heads": d.num_key_value_heads,
        "head_dim": d.head_dim,
        "hidden_act": "silu",
        "vocab_size": d.vocab_size,
        "max_position_embeddings": d.max_position_embeddings,
        "rms_norm_eps": d.rms_norm_eps,
        **rope_config_fields(d.rope_theta, d.rope_scaling),
        # every layer full, non-causal attention (vLLM `_resolve_layer_attention`, SGLang
        # `_get_dflash_layer_attention_params`: full_attention -> ENCODER_ONLY)
        "layer_types": ["full_attention"] * d.num_hidden_layers,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    if target is not None:
        fields.update(target.token_ids())
    return fields


def speculators_config(
    d: DFlashConfig, target: TargetModel | None, target_name: str, speculative_tokens: int
) -> dict:
    """speculators' `dflash` config. vLLM drafts blocks of `1 + num_speculative_tokens`
    (`v1/spec_decode/dflash.py` `num_query_per_req`) and never reads `block_size`; a server
    started without `num_speculative_tokens` takes `proposal_methods[0].speculative_tokens`
    (`SpeculatorsConfig.build_vllm_speculative_config`), so it is the block's, `block_size - 1`,
    whatever `speculative_tokens` (EAGLE-3's k) says."""
    del speculative_tokens  # the block fixes it
    return {
        "architectures": ["DFlashSpeculator"],
        vllm.SPECULATORS_TYPE_KEY: vllm.DFLASH_TYPE,
        "speculators_version": "0.9.0",
        "transformer_layer_config": qwen3_fields(d, target),
        "draft_vocab_size": d.vocab_size,
        "target_hidden_size": d.target_hidden_size,
        "block_size": d.block_size,
        vllm.DFLASH_AUX_IDS_KEY: vllm.to_vllm_layer_ids(d.aux_layer_ids),
        vllm.DFLASH_MASK_KEY: d.mask_token_id,
        "sample_from_anchor": False,
        "speculators_config": {
            "algorithm": vllm.DFLASH_TYPE,
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": d.block_size - 1}
            ],
            "default_proposal_method": "greedy",
            "verifier": {
                "name_or_path": target_name,
                "architectures": target.architectures if target else [],
            },
        },
        "eyas": {"version": __version__, "method": "dflash", "engine": "vllm"},
    }


def zlab_config(d: DFlashConfig, target: TargetModel | None) -> dict:
    """z-lab's layout: what SGLang's `parse_dflash_draft_config` reads (target ids count layer
    outputs: HF index - 1, to which `set_dflash_layers_to_capture` adds one)."""
    # SGLang's `parse_dflash_draft_config` refuses a num_target_layers below 1: unknown is absent
    depth = d.target_num_layers or (target.num_layers if target is not None else 0)
    return {
        "architectures": [sglang.DFLASH_ARCHITECTURE],
        **qwen3_fields(d, target),
        "block_size": d.block_size,
        **({"num_target_layers": depth} if depth else {}),
        sglang.DFLASH_CONFIG_KEY: {
            sglang.DFLASH_MASK_KEY: d.mask_token_id,
            sglang.DFLASH_TARGET_LAYERS_KEY: sglang.to_sglang_layer_ids(d.aux_layer_ids),
        },
        "eyas": {
            "version": __version__,
            "method": "dflash",
            "engine": "sglang",
            "aux_layer_convention": "dflash_config.target_layer_ids: HF hidden_states index - 1",
            "trained_hf_layers": list(d.aux_layer_ids),
        },
    }


def exported_tensors(model: Any) -> dict[str, Any]:
    """The drafter's tensors in bf16, less the target's (`NOT_EXPORTED`)."""
    import torch

    return {
        k: v.to(torch.bfloat16).contiguous()
        for k, v in model.state_dict().items()
        if k not in NOT_EXPORTED
    }


# speculators' DFlash family and z-lab's architectures: the layout is DFlash's for all, DFlash2
# adds its keys (`eyas.drafter.dflash2.export`)
SPECULATORS_TYPES = (vllm.DFLASH_TYPE, vllm.DFLASH2_TYPE)
ZLAB_ARCHITECTURES = (sglang.DFLASH_ARCHITECTURE, sglang.DFLASH2_ARCHITECTURE)


def is_speculators(cfg: dict) -> bool:
    return cfg.get(vllm.SPECULATORS_TYPE_KEY) in SPECULATORS_TYPES


def is_zlab(cfg: dict) -> bool:
    named = set(cfg.get("architectures") or [])
    return bool(named.intersection(ZLAB_ARCHITECTURES)) and not is_speculators(cfg)


def is_dflash_family(cfg: dict) -> bool:
    return is_speculators(cfg) or is_zlab(cfg)


def is_dflash2(cfg: dict) -> bool:
    return cfg.get(vllm.SPECULATORS_TYPE_KEY) == vllm.DFLASH2_TYPE or (
        is_zlab(cfg) and sglang.DFLASH2_ARCHITECTURE in cfg["architectures"]
    )


def layer_config(cfg: dict) -> dict:
    return (cfg.get("transformer_layer_config") or {}) if is_speculators(cfg) else cfg


def zlab_default_target_layers(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """z-lab `build_target_layer_ids` (also SGLang `dflash_utils.build_target_layer_ids`), in
    its own terms (layer outputs): one layer per draft layer, spread over 1..N-3."""
    if num_draft_layers == 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [round(start + (i * span) / (num_draft_layers - 1)) for i in range(num_draft_layers)]


def exported_aux_layers(cfg: dict) -> list[int] | None:
    """The HF `hidden_states` indices the engine feeds the drafter."""
    if is_speculators(cfg):
        ids = cfg.get(vllm.DFLASH_AUX_IDS_KEY)
        return sorted(vllm.from_vllm_layer_ids(ids)) if ids else None
    dflash = cfg.get(sglang.DFLASH_CONFIG_KEY) or {}
    ids = dflash.get(sglang.DFLASH_TARGET_LAYERS_KEY, cfg.get(sglang.DFLASH_TARGET_LAYERS_KEY))
    if ids is None and cfg.get("num_target_layers") and cfg.get("num_hidden_layers"):
        ids = zlab_default_target_layers(cfg["num_target_layers"], cfg["num_hidden_layers"])
    # `set_dflash_layers_to_capture` adds one under every SGLang version, as vLLM does
    return sorted(sglang.from_sglang_layer_ids(ids)) if ids else None


def read_config(cfg: dict) -> DFlashConfig:
    layer = layer_config(cfg)
    for key, unsupported in (("attention_bias", True), ("sample_from_anchor", True)):
        if layer.get(key) is unsupported or cfg.get(key) is unsupported:
            raise DrafterLoadError(f"DFlash drafters with {key}: true are not supported")
    if any(t != "full_attention" for t in layer.get("layer_types") or []):
        raise DrafterLoadError("DFlash drafters with sliding-window layers are not supported")
    aux = exported_aux_layers(cfg)
    if not aux:
        raise DrafterLoadError("the DFlash config names no target layers")
    dflash = cfg.get(sglang.DFLASH_CONFIG_KEY) or {}
    mask = cfg.get(vllm.DFLASH_MASK_KEY, dflash.get(sglang.DFLASH_MASK_KEY))
    block = cfg.get("block_size", dflash.get("block_size"))
    if mask is None or block is None:
        raise DrafterLoadError("the DFlash config names no mask_token_id or block_size")
    hidden, heads = layer["hidden_size"], layer["num_attention_heads"]
    theta, scaling = read_rope_fields(layer)
    return DFlashConfig(
        hidden_size=hidden,
        intermediate_size=layer["intermediate_size"],
        num_hidden_layers=layer["num_hidden_layers"],
        num_attention_heads=heads,
        num_key_value_heads=layer.get("num_key_value_heads", heads),
        head_dim=layer.get("head_dim") or hidden // heads,
        vocab_size=layer["vocab_size"],
        target_hidden_size=cfg.get("target_hidden_size") or hidden,
        aux_layer_ids=list(aux),
        block_size=int(block),
        mask_token_id=int(mask),
        max_position_embeddings=layer.get("max_position_embeddings", 4096),
        rms_norm_eps=layer.get("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        target_num_layers=int(cfg.get("num_target_layers") or 0),
    )


def expected_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    layer = layer_config(cfg)
    h, inter = layer.get("hidden_size"), layer.get("intermediate_size")
    nh, nkv = layer.get("num_attention_heads"), layer.get("num_key_value_heads") or 0
    hd = layer.get("head_dim") or (h // nh if h and nh else None)
    ht = cfg.get("target_hidden_size") or h
    n_aux = len(exported_aux_layers(cfg) or [])
    out = {"fc.weight": (h, n_aux * ht), "hidden_norm.weight": (h,), "norm.weight": (h,)}
    for i in range(int(layer.get("num_hidden_layers") or 0)):
        p = f"layers.{i}."
        out.update(
            {
                p + "self_attn.q_proj.weight": (nh * hd, h),
                p + "self_attn.k_proj.weight": (nkv * hd, h),
                p + "self_attn.v_proj.weight": (nkv * hd, h),
                p + "self_attn.o_proj.weight": (h, nh * hd),
                p + "self_attn.q_norm.weight": (hd,),
                p + "self_attn.k_norm.weight": (hd,),
                p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,),
                p + "mlp.gate_proj.weight": (inter, h),
                p + "mlp.up_proj.weight": (inter, h),
                p + "mlp.down_proj.weight": (h, inter),
            }
        )
    return out
