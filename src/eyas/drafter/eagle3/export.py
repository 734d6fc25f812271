"""EAGLE-3(.1) layouts: SGLang's `LlamaForCausalLMEagle3` and the speculators `eagle3` config
vLLM loads, written from a trained drafter and read back from anyone's export.

Tensor names are the drafter's own (they follow SGLang; vLLM and speculators map `midlayer.`
to `layers.0.`), so export is a save. The config is derived from the trained drafter and the
target's `config.json`, never copied from another model (bug class #49); its rope is the one
the drafter trained with, which follows the target's (YaRN for Kimi-K2.5). The embedding is
exported equal to the target's (bug class #50).
"""

from __future__ import annotations

from typing import Any

import torch

from eyas import __version__
from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.eagle3 import export_mla as mla
from eyas.drafter.eagle3.model import Eagle3Config
from eyas.drafter.method import DrafterLoadError, unsupported_export
from eyas.drafter.rope import read_rope_fields, rope_config_fields
from eyas.hf_models import TargetModel


def llama_fields(d: Eagle3Config, target: TargetModel | None) -> dict[str, Any]:
    fields = {
        "model_type": "llama",
        "num_hidden_layers": 1,
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
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }
    if target is not None:
        fields.update(target.token_ids())
    return fields


def sglang_config(
    d: Eagle3Config, target: TargetModel | None, engine_version: str | None = None
) -> dict:
    """SGLang's EAGLE-3 config. Its layer ids are HF index - 1, which SGLang's model for the
    target reads alike before and after 0.5.13, or written for the SGLang `engine_version`
    names, or refused (`sglang.layer_id_fields`). EAGLE-3.1
    needs SGLang 0.5.12 or later (`sglang.EAGLE3_1_SINCE`), so `engine_version` must say so."""
    if d.norm_before_residual:
        raise unsupported_export(
            d.method,
            "sglang",
            "norm_before_residual: SGLang's LlamaDecoderLayer (llama_eagle3.py) keeps the "
            "un-normed state as the residual; it would serve a different model. Export "
            "--format vllm",
        )
    v31 = d.fc_norm or d.norm_output
    said = sglang.version_gap(engine_version, sglang.EAGLE3_1_SINCE)
    if v31 and said:
        raise unsupported_export(
            "eagle3.1",
            "sglang",
            f"SGLang reads fc_norm and norm_output from {sglang.EAGLE3_1_SINCE} on "
            "(python/sglang/srt/models/llama_eagle3.py); an older one drops fc_norm and feeds "
            f"the pre-norm state back, serving a different model ({said}). Give "
            f"--engine-version with the SGLang that serves it ({sglang.EAGLE3_1_SINCE} or "
            "later), or export --format vllm",
        )
    norms = {sglang.FC_NORM_KEY: d.fc_norm, sglang.NORM_OUTPUT_KEY: d.norm_output} if v31 else {}
    since = {"min_sglang_version": sglang.EAGLE3_1_SINCE} if v31 else {}
    ids, id_meta = sglang.layer_id_fields(
        d.aux_layer_ids, target.architectures if target else None, engine_version
    )
    return {
        "architectures": [sglang.EAGLE3_ARCHITECTURE],
        **llama_fields(d, target),
        "draft_vocab_size": d.draft_vocab_size,
        "target_hidden_size": d.target_hidden_size,
        sglang.EAGLE_CONFIG_KEY: {sglang.AUX_IDS_KEY: ids, sglang.USE_AUX_KEY: True},
        **norms,
        "eyas": {
            "version": __version__,
            "method": d.method,
            "engine": "sglang",
            **since,
            **id_meta,
        },
    }


def speculators_config(
    d: Eagle3Config, target: TargetModel | None, target_name: str, speculative_tokens: int
) -> dict:
    """The speculators `eagle3` config vLLM reads (`update_eagle3`); EAGLE-3.1 is the same
    algorithm with `fc_norm` and `norm_output` set, written at the top level (vLLM >= 0.25
    copies them from there, defaulting to False) and in `transformer_layer_config` (which every
    vLLM copies into the drafter's config wholesale: the only place vLLM <= 0.23 finds them)."""
    layer = llama_fields(d, target)
    layer.update({vllm.FC_NORM_KEY: d.fc_norm, vllm.NORM_OUTPUT_KEY: d.norm_output})
    return {
        "architectures": ["Eagle3Speculator"],
        vllm.SPECULATORS_TYPE_KEY: "eagle3",
        "speculators_version": "0.9.0",
        "transformer_layer_config": layer,
        "draft_vocab_size": d.draft_vocab_size,
        "norm_before_residual": d.norm_before_residual,
        vllm.FC_NORM_KEY: d.fc_norm,
        vllm.NORM_OUTPUT_KEY: d.norm_output,
        "target_hidden_size": d.target_hidden_size,
        vllm.AUX_IDS_KEY: vllm.to_vllm_layer_ids(d.aux_layer_ids),
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": speculative_tokens}
            ],
            "default_proposal_method": "greedy",
            "verifier": {
                "name_or_path": target_name,
                "architectures": target.architectures if target else [],
            },
        },
        "eyas": {"version": __version__, "method": d.method, "engine": "vllm"},
    }


def exported_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The drafter's tensors as both layouts ship them: the float weights in bf16 (as servers
    load them); the vocabulary mapping (`d2t` int64, `t2d` bool) only for a reduced draft
    vocabulary: vLLM's draft classes have no parameter for `d2t` when the draft vocabulary is
    the target's and refuse the weights (`vllm.ships_draft_to_target`), and SGLang reads a
    missing `d2t` as the identity it would be (`sglang` conventions, "The draft vocabulary")."""
    d = model.config
    tensors = {
        k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
        for k, v in model.state_dict().items()
    }
    if not vllm.ships_draft_to_target(d.draft_vocab_size, d.vocab_size):
        d2t = tensors.pop(vllm.DRAFT_TO_TARGET_KEY)
        tensors.pop(vllm.TARGET_TO_DRAFT_KEY)
        if bool(d2t.any()):  # a whole vocabulary maps every id to itself
            raise DrafterLoadError(
                "the drafter's draft vocabulary is the whole target vocabulary but its d2t is "
                "not the identity"
            )
    return tensors


def is_sglang(cfg: dict) -> bool:
    return sglang.EAGLE3_ARCHITECTURE in (cfg.get("architectures") or []) or (
        mla.is_mla(cfg) and not cfg.get(vllm.AUX_IDS_KEY)
    )


def is_speculators(cfg: dict) -> bool:
    return cfg.get(vllm.SPECULATORS_TYPE_KEY) == "eagle3"


def layer_config(cfg: dict) -> dict:
    return (cfg.get("transformer_layer_config") or {}) if is_speculators(cfg) else cfg


def exported_aux_layers(cfg: dict) -> list[int] | None:
    """The HF `hidden_states` indices an SGLang or speculators config makes the engine feed
    the drafter, in the order it fuses them (layer order; `sglang.read_layer_ids` says how
    SGLang ids are read; speculators/vLLM's are the HF index)."""
    if is_speculators(cfg) or (mla.is_mla(cfg) and cfg.get(vllm.AUX_IDS_KEY)):
        ids = cfg.get(vllm.AUX_IDS_KEY)
        return sorted(vllm.from_vllm_layer_ids(ids)) if ids else None
    ids = (cfg.get(sglang.EAGLE_CONFIG_KEY) or {}).get(sglang.AUX_IDS_KEY)
    if not ids:
        return None
    return sorted(sglang.read_layer_ids(ids, **_eyas_written(cfg))[0])


def _eyas_written(cfg: dict) -> dict:
    """How eyas wrote the ids, when it did (`sglang.layer_id_fields`)."""
    meta = cfg.get("eyas") or {}
    return {
        "written_by_eyas": "trained_hf_layers" in meta,
        "eyas_rule": meta.get("sglang_ids_rule") or sglang.PLUS_ONE,
    }


def aux_layer_rule(cfg: dict) -> str:
    """How `exported_aux_layers` read the config's ids (said by `eyas eval`/`export check`)."""
    if is_speculators(cfg) or (mla.is_mla(cfg) and cfg.get(vllm.AUX_IDS_KEY)):
        return "vLLM/speculators ids are the HF index"
    ids = (cfg.get(sglang.EAGLE_CONFIG_KEY) or {}).get(sglang.AUX_IDS_KEY)
    if not ids:
        return "no ids"
    return sglang.read_layer_ids(ids, **_eyas_written(cfg))[1]


def read_config(cfg: dict) -> Eagle3Config:
    """An Eagle3Config from an SGLang or speculators `config.json`; aux ids in HF terms."""
    if mla.is_mla(cfg):
        aux = exported_aux_layers(cfg)
        if not aux:
            raise DrafterLoadError(
                "the MLA drafter config names no eagle_aux_hidden_state_layer_ids"
            )
        return Eagle3Config(
            **mla.config_fields(cfg),
            aux_layer_ids=list(aux),
            extra={"aux_layer_rule": aux_layer_rule(cfg)},
        )
    if is_speculators(cfg):
        if cfg.get(vllm.NORM_BEFORE_FC_KEY):
            raise DrafterLoadError(
                f"speculators option {vllm.NORM_BEFORE_FC_KEY} is not supported (one RMSNorm "
                "over all fused layers; eyas trains and reads fc_norm, per layer)"
            )
        # read as vLLM reads it (`update_eagle3`): absent norm_before_residual means True
        norms = {
            "norm_before_residual": bool(
                cfg.get("norm_before_residual", vllm.NORM_BEFORE_RESIDUAL_DEFAULT)
            ),
            # top level, as vLLM >= 0.25 reads them (`export check` flags a config whose nested
            # copy, the one vLLM <= 0.23 reads, says otherwise)
            "fc_norm": bool(cfg.get(vllm.FC_NORM_KEY, False)),
            "norm_output": bool(cfg.get(vllm.NORM_OUTPUT_KEY, False)),
        }
    elif is_sglang(cfg):
        # as `llama_eagle3.py` (0.5.12 on) reads them: the residual is never normed
        norms = {
            "fc_norm": bool(cfg.get(sglang.FC_NORM_KEY) or cfg.get(sglang.LEGACY_FC_NORM_KEY)),
            "norm_output": bool(cfg.get(sglang.NORM_OUTPUT_KEY, False)),
        }
    else:
        raise DrafterLoadError(
            f"unknown drafter config: architectures={cfg.get('architectures')}; expected "
            "LlamaForCausalLMEagle3 (SGLang) or speculators eagle3"
        )
    layer = layer_config(cfg)
    if layer.get("num_hidden_layers", 1) != 1:
        raise DrafterLoadError(
            f"drafters with {layer.get('num_hidden_layers')} decoder layers are not supported"
        )
    aux = exported_aux_layers(cfg)
    if not aux:
        raise DrafterLoadError(
            "the config names no eagle_aux_hidden_state_layer_ids: which target layers it "
            "fuses is unknown"
        )
    return Eagle3Config(
        **exported_layer_fields(cfg, layer, aux),
        extra={"aux_layer_rule": aux_layer_rule(cfg)},
        **norms,
    )


def exported_layer_fields(cfg: dict, layer: dict, aux: list[int]) -> dict[str, Any]:
    """The decoder layer's fields of an exported EAGLE-3-shaped config (speculators' or
    SGLang's), as a drafter config takes them: read alike by EAGLE-3 and P-EAGLE."""
    hidden, heads = layer["hidden_size"], layer["num_attention_heads"]
    theta, scaling = read_rope_fields(layer)
    return {
        "hidden_size": hidden,
        "intermediate_size": layer["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": layer.get("num_key_value_heads", heads),
        "vocab_size": layer["vocab_size"],
        "draft_vocab_size": cfg.get("draft_vocab_size") or layer["vocab_size"],
        "target_hidden_size": cfg.get("target_hidden_size") or hidden,
        "aux_layer_ids": list(aux),
        "max_position_embeddings": layer.get("max_position_embeddings", 4096),
        "rms_norm_eps": layer.get("rms_norm_eps", 1e-6),
        "rope_theta": theta,
        "rope_scaling": scaling,
        "head_dim": layer.get("head_dim") or hidden // heads,
    }


def layout_problems(cfg: dict) -> list[str]:
    """Keys one engine version reads differently from another (the validator's rule)."""
    problems = []
    if mla.is_mla(cfg) and "attention_factor" in (cfg.get("rope_scaling") or {}):
        problems.append(
            "rope_scaling has attention_factor: vLLM's DeepseekV2MLAAttention reads 1.0 there as "
            "deepseek_llama_scaling, another rope; write DeepSeek's mscale/mscale_all_dim"
        )
    if is_speculators(cfg):
        nested = layer_config(cfg)
        for key in (vllm.FC_NORM_KEY, vllm.NORM_OUTPUT_KEY):
            top, inner = bool(cfg.get(key, False)), bool(nested.get(key, False))
            if top != inner:
                problems.append(
                    f"{key} is {top} at the top level (read by vLLM >= 0.25) but {inner} in "
                    "transformer_layer_config (the only copy vLLM <= 0.23 reads): write both"
                )
    return problems


def expected_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """What SGLang's and vLLM's EAGLE-3 loaders expect, by name and shape."""
    if mla.is_mla(cfg):
        return mla.expected_tensors(cfg, len(exported_aux_layers(cfg) or [None] * 3))
    layer = layer_config(cfg)
    h, v = layer.get("hidden_size"), layer.get("vocab_size")
    # an absent draft_vocab_size is the vocabulary's, as both engines and `read_config` read it
    dv, ht = cfg.get("draft_vocab_size") or v, cfg.get("target_hidden_size") or h
    nh, nkv = layer.get("num_attention_heads"), layer.get("num_key_value_heads")
    hd = layer.get("head_dim") or (h // nh if h and nh else None)
    inter = layer.get("intermediate_size")
    n_aux = len(exported_aux_layers(cfg) or [None] * 3)
    out = {
        "fc.weight": (h, n_aux * ht),
        "norm.weight": (h,),
        "lm_head.weight": (dv, h),
        "embed_tokens.weight": (v, h),
        "midlayer.self_attn.q_proj.weight": (nh * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": (nkv * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": (h, nh * hd),
        "midlayer.mlp.gate_proj.weight": (inter, h),
        "midlayer.mlp.up_proj.weight": (inter, h),
        "midlayer.mlp.down_proj.weight": (h, inter),
        "midlayer.input_layernorm.weight": (h,),
        "midlayer.hidden_norm.weight": (h,),
        "midlayer.post_attention_layernorm.weight": (h,),
    }
    if vllm.ships_draft_to_target(dv, v):
        out.update({vllm.DRAFT_TO_TARGET_KEY: (dv,), vllm.TARGET_TO_DRAFT_KEY: (v,)})
    if (is_speculators(cfg) and cfg.get(vllm.FC_NORM_KEY)) or (
        is_sglang(cfg) and (cfg.get(sglang.FC_NORM_KEY) or cfg.get(sglang.LEGACY_FC_NORM_KEY))
    ):
        out.update({f"fc_norm.{i}.weight": (ht,) for i in range(n_aux)})
    return out
