"""SGLang's conventions that eyas depends on, each with the upstream code it comes from.
Contract tests (`tests/backends/test_engine_conventions.py`) pin every rule here.

**Layer ids.** eyas stores target layers by their Hugging Face `hidden_states` index: index i
is the residual stream entering decoder layer i (0 = the embedding output). SGLang's config ids
name a layer's *output* instead. Every `set_eagle3_layers_to_capture(layer_ids)` in
`python/sglang/srt/models/` (llama.py, deepseek_v2.py for DeepSeek-V3 and Kimi, glm4_moe.py,
gpt_oss.py; kimi_k25.py forwards to its DeepSeek-V3 language model) does

    # we plus 1 here because in sglang, for the ith layer, it takes the output
    # of the (i-1)th layer as aux hidden state
    self.model.layers_to_capture = [val + 1 for val in layer_ids]

and the layer loop appends `hidden_states + residual` before running layer i. So SGLang id k
captures HF index k + 1, and an export must write HF index - 1. Without ids SGLang captures
`[2, N // 2, N - 3]` set directly, in HF terms. `set_dflash_layers_to_capture` applies the
same `+ 1` and refuses to run without explicit ids.
"""

from __future__ import annotations

from eyas.errors import EyasError

# `layers_to_capture = [val + 1 for val in layer_ids]` (see the module docstring)
LAYER_ID_OFFSET = 1

# What SGLang reads from an EAGLE-3 drafter's config.json:
# `python/sglang/srt/models/llama_eagle3.py` `LlamaForCausalLMEagle3` (EntryClass; own lm_head
# when `draft_vocab_size` is set; `target_hidden_size` sizes `fc`) and
# `python/sglang/srt/model_executor/model_runner.py` (the `eagle_config` block).
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
EAGLE_CONFIG_KEY = "eagle_config"
AUX_IDS_KEY = "eagle_aux_hidden_state_layer_ids"
USE_AUX_KEY = "use_aux_hidden_state"

# EAGLE-3.1 (`fc_norm`, `norm_output`): `llama_eagle3.py` has neither. `LlamaModel.forward`
# applies `self.fc` straight to the captured states and returns the pre-norm state for the
# next draft step (`hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states,
# residual)`; "For draft decode, we capture the hidden state before norm"), and
# `LlamaForCausalLMEagle3.load_weights` skips any tensor it has no parameter for (`if
# param_name in params_dict`), so `fc_norm.*` would be dropped silently: SGLang serves an
# EAGLE-3.1 drafter as a different model. Read at sgl-project/sglang commits 03d5a77 and
# d737979 of `python/sglang/srt/models/llama_eagle3.py`.
EAGLE3_1_SERVABLE = False

# DFlash: `python/sglang/srt/models/dflash.py` `DFlashDraftModel` (EntryClass; no embedding or
# lm_head: the target's are used) reads `python/sglang/srt/speculative/dflash_utils.py`
# `parse_dflash_draft_config`: `dflash_config.target_layer_ids` (or top level), `mask_token_id`
# (else the string `mask_token`, default "<|MASK|>"), `block_size` (dflash_config or top
# level), `num_target_layers`; `fc` is `len(target_layer_ids) * hidden_size` wide, so the
# drafter's hidden size is the target's. Every `set_dflash_layers_to_capture(layer_ids)` (e.g.
# `models/qwen3.py`) requires explicit ids and does `layers_to_capture = [val + 1 for val in
# layer_ids]`: the ids count layer outputs, HF index - 1, like EAGLE-3's.
DFLASH_ARCHITECTURE = "DFlashDraftModel"
DFLASH_CONFIG_KEY = "dflash_config"
DFLASH_TARGET_LAYERS_KEY = "target_layer_ids"
DFLASH_MASK_KEY = "mask_token_id"

# `python/sglang/srt/managers/tokenizer_manager_components/spec_decoding_meta.py`
# `fill_spec_decoding_meta`: these keys are written into `meta_info` only when the request's
# `spec_verify_ct` is > 0 (a request that stops at its first token carries none of them), so a
# missing `spec_verify_ct` is zero verify steps, not a server without speculation.
VERIFY_COUNT_KEY = "spec_verify_ct"
ACCEPT_LENGTH_KEY = "spec_accept_length"
SPEC_META_KEYS = (
    VERIFY_COUNT_KEY,
    ACCEPT_LENGTH_KEY,
    "spec_accept_rate",
    "spec_accepted_drafts",
    "spec_proposed_drafts",
    "spec_num_correct_drafts",  # the names of another build of the same function
    "spec_num_proposed_drafts",
    "spec_accept_histogram",
)

# **Aborts.** `python/sglang/srt/managers/schedule_batch.py`: `FINISH_ABORT(message,
# status_code, err_type).to_json()` is `{"type": "abort", "message", "status_code",
# "err_type"}`. `Req.set_finish_with_abort(error_msg)` (an invalid request, e.g. an input
# longer than `validate_input_length` allows) sets `FINISH_ABORT(error_msg,
# HTTPStatus.BAD_REQUEST, "BadRequestError")`; a plain `FINISH_ABORT()` (an abort request, a
# client that went away) has no status. `tokenizer_manager.py`
# `TokenizerManager._handle_abort_finish_reason` turns a 400 abort into `ValueError` (HTTP
# 400) and a 500/503 abort into `HTTPException` of that status for non-streamed requests, and
# passes the abort object through otherwise. So an abort's `status_code` decides: 400 is
# permanent, 5xx and none are transient. A batch `/generate` gathers its items, so one bad
# item answers the whole batch with HTTP 400.
ABORT_STATUS_KEY = "status_code"

# **Liveness.** `python/sglang/srt/entrypoints/http_server.py` `health_generate` (serving both
# `/health` and `/health_generate`) answers 200 only when the tokenizer manager has received
# output from the scheduler since the check began ("As long as we receive any response from
# the detokenizer/scheduler, we consider the server is healthy"; `HEALTH_CHECK_TIMEOUT`, 20 s,
# else 503). A busy scheduler sends output even for non-streamed requests every
# `DEFAULT_FORCE_STREAM_INTERVAL` tokens (`scheduler_output_processor_mixin.py`
# `stream_output_generation`), so a 200 proves the scheduler is making progress. (`/metrics`,
# only with `--enable-metrics`, counts `sglang:generation_tokens_total` when requests finish,
# `python/sglang/srt/metrics/collector.py` `TokenizerMetricsCollector`, so it cannot show a long
# request's progress.)
HEALTH_PATH = "/health"


def to_sglang_layer_ids(hf_ids: list[int]) -> list[int]:
    """The ids to write into an SGLang config so that SGLang captures `hf_ids`."""
    out = [int(i) - LAYER_ID_OFFSET for i in hf_ids]
    if any(i < 0 for i in out):
        raise EyasError(
            "bad_aux_layers",
            f"HF layer {min(hf_ids)} (the embedding output) has no SGLang layer id: SGLang "
            "captures layer outputs only",
        )
    return out


def from_sglang_layer_ids(sglang_ids: list[int]) -> list[int]:
    """The HF `hidden_states` indices SGLang captures for config ids `sglang_ids`."""
    return [int(i) + LAYER_ID_OFFSET for i in sglang_ids]


def default_capture_ids(num_layers: int) -> list[int]:
    """What SGLang captures when a config names no ids, in HF terms (no offset applied)."""
    return [2, num_layers // 2, num_layers - 3]
