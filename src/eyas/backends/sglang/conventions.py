"""SGLang's conventions that eyas depends on, each with the upstream code it comes from.
Contract tests (`tests/backends/test_engine_conventions.py`, and `tests/backends/test_sglang_source.py`,
which runs the functions below from SGLang's released wheels) pin every rule here.

**Layer ids.** eyas stores target layers by their Hugging Face `hidden_states` index: index i
is the residual stream entering decoder layer i (0 = the embedding output). SGLang's config ids
go through the target model's `set_eagle3_layers_to_capture(layer_ids)`, whose layer loop
appends `hidden_states + residual` *before* running layer i for every i in
`layers_to_capture`, so `layers_to_capture` is in HF terms. How ids become `layers_to_capture`
depends on the SGLang version and the target's model file (read in the wheels on PyPI,
`python/sglang/srt/models/*.py`):

- `plus_one`: `layers_to_capture = [val + 1 for val in layer_ids]` ("we plus 1 here because in
  sglang, for the ith layer, it takes the output of the (i-1)th layer"): every model up to
  0.5.12.post1, and llama.py, qwen2/qwen3/qwen3_moe.py, glm4_moe.py and most others still at
  0.5.23. Ids name layer outputs: HF index - 1.
- `first_id`: from 0.5.13 (PR #25454, merged 2026-05-16) deepseek_v2.py
  (`DeepseekV2/V3/V32ForCausalLM`, and so Kimi-K2/K2.5, whose `kimi_k25.py` wrapper forwards to
  `DeepseekV3ForCausalLM`) and glm4_moe_lite.py add one only when the first id is 1 (`if
  layer_ids and layer_ids[0] == 1: ... [val + 1 ...] else: list(layer_ids)`): ids starting at
  2 are the HF index ("input-to-layer-X", as `lightseekorg/kimi-k2.5-eagle3-mla` ships
  `[2, 30, 58]`).
- gpt_oss.py (0.5.23): ids are taken as they are when their largest is N, else plus one.

So ids whose first entry is 1 (HF 2, ...) are read alike by every rule; an export whose first
HF id is not 2 is right on a `plus_one` target, but on a DeepSeek/Kimi target cannot be right on
both sides of 0.5.13 and is refused (`to_sglang_layer_ids`). Without ids SGLang captures
`[2, N // 2, N - 3]` set directly, in HF terms. `set_dflash_layers_to_capture` applies `+ 1`
unconditionally (0.5.23 too) and refuses to run without explicit ids.
"""

from __future__ import annotations

from typing import Any

from eyas.errors import EyasError, RefusedError

# `layers_to_capture = [val + 1 for val in layer_ids]` (see the module docstring)
LAYER_ID_OFFSET = 1
PLUS_ONE, FIRST_ID = "plus_one", "first_id"
# target architectures (HF `architectures[0]`) whose SGLang model applies the first-id rule
# from 0.5.13 on: deepseek_v2.py `EntryClass`, kimi_k25.py, glm4_moe_lite.py
FIRST_ID_ARCHITECTURES = frozenset(
    {
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV32ForCausalLM",
        "KimiK25ForConditionalGeneration",
        "Glm4MoeLiteForCausalLM",
    }
)
FIRST_ID_SINCE = "0.5.13"

# What SGLang reads from an EAGLE-3 drafter's config.json:
# `python/sglang/srt/models/llama_eagle3.py` `LlamaForCausalLMEagle3` (EntryClass; own lm_head
# when `draft_vocab_size` is set; `target_hidden_size` sizes `fc`) and
# `python/sglang/srt/model_executor/model_runner.py` (the `eagle_config` block).
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
EAGLE_CONFIG_KEY = "eagle_config"
AUX_IDS_KEY = "eagle_aux_hidden_state_layer_ids"
USE_AUX_KEY = "use_aux_hidden_state"

# EAGLE-3.1 (`fc_norm`, `norm_output`): `llama_eagle3.py` reads both from the top level of the
# config from 0.5.12 on: `LlamaModel.__init__` builds `fc_norm` as one RMSNorm per fused layer
# (`getattr(config, "fc_norm", None)`, or the legacy `use_aux_norm`), `forward` norms each
# layer's chunk before `fc` and returns the normed state for the next step when
# `getattr(config, "norm_output", False)`; `LlamaForCausalLMEagle3.load_weights` puts
# `fc_norm.{i}.weight` under `model.` (tests/backends/test_sglang_eagle3_1.py runs that code
# from the 0.5.12.post1 and 0.5.23 wheels). Up to 0.5.11 it has neither: `fc` takes the captured
# states as they are, the pre-norm state is fed back, and the loader skips any tensor it has no
# parameter for, so `fc_norm.*` would be dropped silently and a different model served. An
# export cannot tell which SGLang will load it: eyas writes the EAGLE-3.1 layout for SGLang only
# when the user names a version from `EAGLE3_1_SINCE` on (`eyas export drafter --engine-version`).
EAGLE3_1_SINCE = "0.5.12"

# The draft vocabulary: `llama_eagle3.py` `LlamaForCausalLMEagle3.load_weights` and
# `kimi_k25_eagle3.py` `Eagle3DeepseekV2ForCausalLM.load_weights` (0.5.12.post1 and 0.5.23)
# turn a shipped `d2t` into `hot_token_id = d2t + arange(len(d2t))` (the target id of each draft
# id) and skip `t2d`; without `d2t`, `hot_token_id` stays None and draft ids are taken as target
# ids ("absent in checkpoints whose draft_vocab_size equals vocab_size", kimi_k25_eagle3.py).
# So a reduced draft vocabulary must ship `d2t`; a whole one may or may not (an identity
# `d2t`), and eyas writes none, the layout vLLM's loader requires too.
FC_NORM_KEY = "fc_norm"
LEGACY_FC_NORM_KEY = "use_aux_norm"
NORM_OUTPUT_KEY = "norm_output"


def version_gap(engine_version: str | None, since: str) -> str | None:
    """Why the SGLang the user named may not serve a layout that needs `since` or later
    (no version named, or an older one); None when it does."""
    if engine_version is None:
        return "no --engine-version"
    return None if version_at_least(engine_version, since) else f"SGLang {engine_version} is older"


def version_at_least(version: str, since: str) -> bool:
    """Whether SGLang `version` (as `pip` names it, e.g. 0.5.12.post1) is `since` or later."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version) >= Version(since)
    except InvalidVersion as exc:
        raise EyasError(
            "bad_engine_version", f"{version!r} is not a version (e.g. 0.5.23)"
        ) from exc


# EAGLE-3 with MLA attention: `python/sglang/srt/models/kimi_k25_eagle3.py`
# `Eagle3DeepseekV2ForCausalLM` (its `EntryClass`; tests/backends/test_sglang_source.py reads the
# file from the 0.5.12.post1 and 0.5.23 wheels and loads eyas's export through its own
# `load_weights`): a DeepSeek `DeepseekV2AttentionMLA` over [embed ; hidden] (2H) that requires
# `q_lora_rank`, a dense `DeepseekV2MLP`, the `eagle_config` ids (`_get_eagle_aux_layer_count`),
# DeepSeek's rope keys (`rope_scaling` with `mscale`/`mscale_all_dim`). In 0.5.12.post1 it has no
# `fc_norm` (its `load_weights` logs "Eagle3 MLA: skipping unexpected weight" and drops them) and
# returns the pre-norm state as the next step's input (`hidden_states_to_aux`); 0.5.23 reads
# `fc_norm` and `norm_output` from the top level. The release that added them to this file lies
# between the two and is not pinned, so an EAGLE-3.1 MLA drafter is exported for SGLang only
# when `--engine-version` names 0.5.23 or later (`EAGLE3_1_MLA_SINCE`: the lowest release known
# to read them; the Llama class's `EAGLE3_1_SINCE` is another file's).
# TorchSpec's published Kimi MLA drafters (`configs/draft_models/kimi_k25_eagle3_mla.json`) use
# this layout.
EAGLE3_MLA_ARCHITECTURE = "Eagle3DeepseekV2ForCausalLM"
EAGLE3_1_MLA_SINCE = "0.5.23"

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

# DFlash2 (SGLang PR #35371): `srt/models/dflash.py` registers `DFlash2DraftModel` (EntryClass)
# on DFlash's worker: `DFlashDraftModel.__init__` wraps each sublayer in `DFlashGroupedConv`
# when `dflash_config.conv_kernel_size` is set (its block the worker's, `set_block_size`),
# `DFlash2DraftModel` adds `CandidateSelector` (`selector_rank`, `selector_top_k`; the target's
# lm_head for the candidates); `dflash_utils.py` `parse_dflash_draft_config` reads the four
# keys from `dflash_config` (absent: 0, no convolution, no selector). The 0.5.19 wheel is the
# first with them (0.5.18's registers no `DFlash2DraftModel` and parses no selector; checked
# by hand in both wheels); eyas exports the layout only for an `--engine-version` from
# `DFLASH2_SINCE` on.
DFLASH2_ARCHITECTURE = "DFlash2DraftModel"
DFLASH2_SINCE = "0.5.19"

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


def capture_rule(target_architectures: list[str] | None) -> str:
    """The rule SGLang's model for this target applies to config ids from 0.5.13 on."""
    archs = set(target_architectures or [])
    return FIRST_ID if archs & FIRST_ID_ARCHITECTURES else PLUS_ONE


def captured_layers(layer_ids: list[int], rule: str, *, since_first_id: bool = True) -> list[int]:
    """The HF indices SGLang captures for config ids under `rule` (the module docstring);
    `since_first_id=False` is an SGLang before 0.5.13, where every model adds one."""
    if rule == FIRST_ID and since_first_id and layer_ids and layer_ids[0] != 1:
        return [int(i) for i in layer_ids]
    return [int(i) + LAYER_ID_OFFSET for i in layer_ids]


def to_sglang_layer_ids(
    hf_ids: list[int],
    target_architectures: list[str] | None = None,
    engine_version: str | None = None,
) -> list[int]:
    """The ids to write into an SGLang config so that SGLang captures `hf_ids` under every
    version's rule for this target, or a refusal saying why none exists (`layer_id_fields`
    also says how to read them back)."""
    return _sglang_ids(hf_ids, target_architectures, engine_version)[0]


def layer_id_fields(
    hf_ids: list[int],
    target_architectures: list[str] | None = None,
    engine_version: str | None = None,
) -> tuple[list[int], dict[str, Any]]:
    """(the config's ids, what eyas records about them in its `eyas` block): the convention,
    and the SGLang version they were written for when it decided them (an export for SGLang
    before 0.5.13 on a DeepSeek/Kimi target with a first layer other than 2 is right only there,
    one after only from there on)."""
    ids, rule = _sglang_ids(hf_ids, target_architectures, engine_version)
    meta: dict[str, Any] = {
        "aux_layer_convention": "sglang: HF hidden_states index - 1"
        if rule == PLUS_ONE
        else f"sglang >= {FIRST_ID_SINCE} on a DeepSeek/Kimi target: the HF index",
        "sglang_ids_rule": rule,
        "trained_hf_layers": [int(i) for i in hf_ids],
    }
    decided = capture_rule(target_architectures) == FIRST_ID and bool(ids) and int(hf_ids[0]) != 2
    if decided:
        meta["sglang_ids_for_version"] = (
            f">= {FIRST_ID_SINCE}" if rule == FIRST_ID else f"< {FIRST_ID_SINCE}"
        )
    return ids, meta


def _sglang_ids(
    hf_ids: list[int], target_architectures: list[str] | None, engine_version: str | None
) -> tuple[list[int], str]:
    out = [int(i) - LAYER_ID_OFFSET for i in hf_ids]
    if any(i < 0 for i in out):
        raise EyasError(
            "bad_aux_layers",
            f"HF layer {min(hf_ids)} (the embedding output) has no SGLang layer id: SGLang "
            "captures layer outputs only",
        )
    if capture_rule(target_architectures) != FIRST_ID or not out or out[0] == 1:
        return out, PLUS_ONE  # read alike by every version
    archs = sorted(set(target_architectures or []))
    if engine_version is not None and not version_at_least(engine_version, FIRST_ID_SINCE):
        return out, PLUS_ONE  # before PR #25454 every model adds one
    if engine_version is not None and hf_ids[0] >= 3:
        # from 0.5.13 a first id other than 1 is taken as it is: write the HF index
        return [int(i) for i in hf_ids], FIRST_ID
    if engine_version is not None:
        raise RefusedError(
            "sglang_layer_ids_unservable",
            f"HF layers {list(hf_ids)} cannot be captured by SGLang {engine_version} on this "
            f"target: its model (deepseek_v2.py, serving {archs}) adds one to the ids only when "
            f"the first is 1 (PR #25454, from {FIRST_ID_SINCE}), so a first HF layer of 1 has no "
            "id (0 is read as the embedding). Train with a first aux layer of 2 or more, or "
            "export --format vllm",
        )
    raise RefusedError(
        "sglang_layer_ids_ambiguous",
        f"HF layers {list(hf_ids)} cannot be written for SGLang on this target: its model "
        f"(deepseek_v2.py, which serves {archs}) adds one to the ids up to SGLang "
        f"{FIRST_ID_SINCE} but, from {FIRST_ID_SINCE} on (PR #25454), only when the first id is "
        f"1, so {out} would be captured as HF {out}. Name the SGLang that serves it "
        "(--engine-version), train with a first aux layer of 2 (SGLang's default "
        "[2, N/2, N-3]), or export --format vllm",
    )


def read_layer_ids(
    ids: list[int], *, written_by_eyas: bool = False, eyas_rule: str = PLUS_ONE
) -> tuple[list[int], str]:
    """(HF indices, the convention chosen and why) for a drafter config's SGLang ids.

    A first id of 0 or 1 names layer outputs (HF 0, the embedding, is never fused): + 1 under
    every SGLang rule. eyas's own exports always mean + 1 (`to_sglang_layer_ids`). A third-party
    first id of 2 or more is the "input-to-layer" convention PR #25454 reads as the HF index
    (`lightseekorg/kimi-k2.5-eagle3-mla`: `[2, 30, 58]`): taken as it is, which is what SGLang
    >= 0.5.13 serves on a DeepSeek/Kimi target; other SGLang models still add one."""
    ids = [int(i) for i in ids]
    if written_by_eyas and eyas_rule == FIRST_ID:
        return ids, f"eyas export for SGLang >= {FIRST_ID_SINCE} on this target: the HF index"
    if written_by_eyas:
        return [i + LAYER_ID_OFFSET for i in ids], "eyas export: SGLang id = HF index - 1"
    if ids and ids[0] <= 1:
        return (
            [i + LAYER_ID_OFFSET for i in ids],
            f"first id {ids[0]}: layer outputs (HF index - 1), read alike by every SGLang rule",
        )
    return (
        ids,
        f"first id {ids[0] if ids else None}: the HF index (PR #25454's input-to-layer "
        f"convention), as SGLang >= {FIRST_ID_SINCE} serves it on DeepSeek-V2/V3/Kimi "
        "targets; SGLang's other models, and any SGLang before it, feed HF index + 1",
    )


def from_sglang_layer_ids(sglang_ids: list[int]) -> list[int]:
    """The HF `hidden_states` indices SGLang captures for eyas-written config ids (+ 1)."""
    return [int(i) + LAYER_ID_OFFSET for i in sglang_ids]


def default_capture_ids(num_layers: int) -> list[int]:
    """What SGLang captures when a config names no ids, in HF terms (no offset applied)."""
    return [2, num_layers // 2, num_layers - 3]
