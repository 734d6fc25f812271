"""EAGLE-3(.1) with MLA attention: the DeepSeek-layer configs vLLM's and SGLang's MLA draft
classes read (`Eagle3DeepseekV3ForCausalLM` in vLLM's `deepseek_eagle3.py`,
`Eagle3DeepseekV2ForCausalLM` in SGLang's `kimi_k25_eagle3.py`; the conventions modules cite
both), written from a trained drafter and read back from anyone's, TorchSpec's published Kimi
MLA drafters included (SGLang's layout: `eagle_config` ids read by SGLang's rules).

Tensor names are the drafter's own (`midlayer.self_attn.q_a_proj`, ..., DeepSeek's), which
both engines map onto their fused `q_a_proj`/`kv_a_proj_with_mqa` and `gate_up_proj`.
"""

from __future__ import annotations

from typing import Any

from eyas import __version__
from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.method import DrafterLoadError, unsupported_export
from eyas.drafter.rope import check_rope_scaling
from eyas.hf_models import TargetModel

ARCHITECTURES = (vllm.EAGLE3_MLA_ARCHITECTURE, sglang.EAGLE3_MLA_ARCHITECTURE)


def is_mla(cfg: dict) -> bool:
    return any(a in ARCHITECTURES for a in (cfg.get("architectures") or []))


def deepseek_rope(scaling: dict[str, Any] | None) -> dict[str, Any] | None:
    """The target's YaRN as DeepSeek writes it (with `mscale`/`mscale_all_dim`, which both
    engines' DeepSeek attention reads for the rope magnitude and the softmax scale), never with
    `attention_factor` (vLLM reads 1.0 there as another rope)."""
    scaling = check_rope_scaling(scaling)
    if scaling is None:
        return None
    out = {k: v for k, v in scaling.items() if k not in ("attention_factor", "attn_factor")}
    out["type"] = out["rope_type"]
    return out


def deepseek_fields(d: Any, target: TargetModel | None) -> dict[str, Any]:
    fields = {
        # not "deepseek_v3": vLLM's `SpeculativeConfig.hf_config_override` rewrites that model
        # type to `deepseek_mtp` (an MTP head, another model); "kimi_k2" is vLLM's alias of
        # DeepseekV3Config (`transformers_utils/config.py`) and TorchSpec's published MLA
        # drafters use it
        "model_type": "kimi_k2",
        "num_hidden_layers": 1,
        "hidden_size": d.hidden_size,
        "intermediate_size": d.intermediate_size,
        "num_attention_heads": d.num_attention_heads,
        "num_key_value_heads": d.num_attention_heads,
        "q_lora_rank": d.q_lora_rank,
        "kv_lora_rank": d.kv_lora_rank,
        "qk_nope_head_dim": d.qk_nope_head_dim,
        "qk_rope_head_dim": d.qk_rope_head_dim,
        "v_head_dim": d.v_head_dim,
        "rope_interleave": True,
        "hidden_act": "silu",
        "vocab_size": d.vocab_size,
        "max_position_embeddings": d.max_position_embeddings,
        "rms_norm_eps": d.rms_norm_eps,
        "rope_theta": float(d.rope_theta),
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": d.target_hidden_size,
    }
    rope = deepseek_rope(d.rope_scaling)
    if rope is not None:
        fields["rope_scaling"] = rope
    if target is not None:
        fields.update(target.token_ids())
    return fields


def vllm_config(d: Any, target: TargetModel | None) -> dict:
    return {
        "architectures": [vllm.EAGLE3_MLA_ARCHITECTURE],
        **deepseek_fields(d, target),
        vllm.AUX_IDS_KEY: vllm.to_vllm_layer_ids(d.aux_layer_ids),
        vllm.FC_NORM_KEY: d.fc_norm,
        vllm.NORM_OUTPUT_KEY: d.norm_output,
        "norm_before_residual": d.norm_before_residual,
        "eyas": {"version": __version__, "method": d.method, "engine": "vllm", "attention": "mla"},
    }


def sglang_config(d: Any, target: TargetModel | None, engine_version: str | None = None) -> dict:
    """SGLang's `Eagle3DeepseekV2ForCausalLM` config; EAGLE-3.1 only for an SGLang that reads
    `fc_norm` and `norm_output` in that file (`sglang.EAGLE3_1_MLA_SINCE`)."""
    if d.norm_before_residual:
        raise unsupported_export(
            f"{d.method} (mla)",
            "sglang",
            "norm_before_residual: SGLang's Eagle3MLADecoderLayer keeps the un-normed state as "
            "the residual; it would serve a different model. Export --format vllm",
        )
    v31 = d.fc_norm or d.norm_output
    since = sglang.EAGLE3_1_MLA_SINCE
    said = sglang.version_gap(engine_version, since)
    if v31 and said:
        raise unsupported_export(
            f"{d.method} (mla)",
            "sglang",
            "SGLang's Eagle3DeepseekV2ForCausalLM (python/sglang/srt/models/kimi_k25_eagle3.py) "
            f"reads fc_norm and norm_output in {since} (not in 0.5.12): an older one skips those "
            f"tensors and feeds the pre-norm state back, serving a different model ({said}). "
            f"Give --engine-version with the SGLang that serves it ({since} or later), or "
            "export --format vllm",
        )
    if not d.q_lora_rank:
        raise unsupported_export(
            f"{d.method} (mla, no q_lora_rank)",
            "sglang",
            "SGLang's Eagle3MLADecoderLayer (python/sglang/srt/models/kimi_k25_eagle3.py) raises "
            "'Eagle3 MLA layer requires q_lora_rank' for a target that projects q directly "
            "(DeepSeek-V2-Lite). Export --format vllm",
        )
    ids, id_meta = sglang.layer_id_fields(
        d.aux_layer_ids, target.architectures if target else None, engine_version
    )
    return {
        "architectures": [sglang.EAGLE3_MLA_ARCHITECTURE],
        **deepseek_fields(d, target),
        sglang.EAGLE_CONFIG_KEY: {sglang.AUX_IDS_KEY: ids, sglang.USE_AUX_KEY: True},
        **({sglang.FC_NORM_KEY: d.fc_norm, sglang.NORM_OUTPUT_KEY: d.norm_output} if v31 else {}),
        "eyas": {
            "version": __version__,
            "method": d.method,
            "engine": "sglang",
            "attention": "mla",
            **({"min_sglang_version": since} if v31 else {}),
            **id_meta,
        },
    }


def config_fields(cfg: dict) -> dict[str, Any]:
    """The Eagle3Config fields a DeepSeek-layer config sets (besides the aux ids)."""
    for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if not cfg.get(key):
            raise DrafterLoadError(f"MLA drafter config without {key}")
    if cfg.get("num_hidden_layers", 1) != 1:
        raise DrafterLoadError(
            f"drafters with {cfg.get('num_hidden_layers')} decoder layers are not supported"
        )
    heads = cfg["num_attention_heads"]
    return {
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "vocab_size": cfg["vocab_size"],
        "draft_vocab_size": cfg.get("draft_vocab_size") or cfg["vocab_size"],
        "target_hidden_size": cfg.get("target_hidden_size") or cfg["hidden_size"],
        "max_position_embeddings": cfg.get("max_position_embeddings", 4096),
        "rms_norm_eps": cfg.get("rms_norm_eps", 1e-6),
        "rope_theta": float(cfg.get("rope_theta") or 10000.0),
        "rope_scaling": check_rope_scaling(cfg.get("rope_scaling")),
        "head_dim": cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"],
        "attention": "mla",
        "q_lora_rank": cfg.get("q_lora_rank") or None,
        "kv_lora_rank": cfg["kv_lora_rank"],
        "qk_nope_head_dim": cfg["qk_nope_head_dim"],
        "qk_rope_head_dim": cfg["qk_rope_head_dim"],
        "v_head_dim": cfg["v_head_dim"],
        # both engines read these from the top level (vLLM `deepseek_eagle3.py`, SGLang's
        # `kimi_k25_eagle3.py` from 0.5.23 on)
        "fc_norm": bool(cfg.get(vllm.FC_NORM_KEY, False)),
        "norm_output": bool(cfg.get(vllm.NORM_OUTPUT_KEY, False)),
        "norm_before_residual": bool(cfg.get("norm_before_residual", False)),
    }


def expected_tensors(cfg: dict, n_aux: int) -> dict[str, tuple[int, ...]]:
    h, v = cfg.get("hidden_size"), cfg.get("vocab_size")
    dv = cfg.get("draft_vocab_size") or v
    ht = cfg.get("target_hidden_size") or h
    nh, inter = cfg.get("num_attention_heads"), cfg.get("intermediate_size")
    ql, kl = cfg.get("q_lora_rank"), cfg.get("kv_lora_rank")
    nope, rope, vd = cfg.get("qk_nope_head_dim"), cfg.get("qk_rope_head_dim"), cfg.get("v_head_dim")
    a = "midlayer.self_attn."
    out = {
        "fc.weight": (h, n_aux * ht),
        "norm.weight": (h,),
        "lm_head.weight": (dv, h),
        "embed_tokens.weight": (v, h),
        a + "kv_a_proj_with_mqa.weight": (kl + rope, 2 * h),
        a + "kv_a_layernorm.weight": (kl,),
        a + "kv_b_proj.weight": (nh * (nope + vd), kl),
        a + "o_proj.weight": (h, nh * vd),
        "midlayer.mlp.gate_proj.weight": (inter, h),
        "midlayer.mlp.up_proj.weight": (inter, h),
        "midlayer.mlp.down_proj.weight": (h, inter),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
    }
    if ql:
        out[a + "q_a_proj.weight"] = (ql, 2 * h)
        out[a + "q_a_layernorm.weight"] = (ql,)
        out[a + "q_b_proj.weight"] = (nh * (nope + rope), ql)
    else:
        out[a + "q_proj.weight"] = (nh * (nope + rope), 2 * h)
    if vllm.ships_draft_to_target(dv, v):
        out.update({vllm.DRAFT_TO_TARGET_KEY: (dv,), vllm.TARGET_TO_DRAFT_KEY: (v,)})
    if cfg.get(vllm.FC_NORM_KEY):
        out.update({f"fc_norm.{i}.weight": (ht,) for i in range(n_aux)})
    return out
