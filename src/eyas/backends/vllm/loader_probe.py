"""Run in a vLLM install's own python (no eyas import): build drafters from exports with vLLM's
own classes, exactly as a vLLM server builds them, and say what it made of each.

    python loader_probe.py SPEC.json          # prints one line: JSON{"vllm": ..., "cases": [...]}

SPEC: {"cases": [{"target": dir, "drafter": export dir, "speculative_config": {...} (vLLM's
`--speculative-config` without the model; null for a speculators export served as
`vllm serve EXPORT`, which takes the target from its verifier), "language_model_only": bool,
"attention_backend": str | null, "dtype": "float32", "max_model_len": int}, ...]}.

What runs is vLLM's: `EngineArgs.create_engine_config` (config loading, `update_eagle3`,
`update_dflash`), the draft `VllmConfig` and `get_model` of `SpecDecodeBaseProposer._get_model`
(the registry picks the class from the export's architecture; the class's `load_weights` maps
and loads the tensors: it raises where a server would refuse the export), and the model
runners' readers of which target layers are fused (`GPUModelRunner.
_get_eagle3_aux_layers_from_config`, the V2 runner's `get_eagle3_aux_layers_from_config`).
Every case runs in this one process (one distributed init); a case that raises is reported
with its error and the next one runs.

eyas runs it for `eyas export check` (`eyas.backends.vllm.loader`), and the parity tests build
on `draft_model` (tests/drafter/vllm_parity_probe.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

STATE: dict[str, Any] = {"distributed": False, "loaded": {}}


def _record_loaded_weights() -> None:
    """Keep what each `AutoWeightsLoader.load_weights` call returns (the parameters it filled,
    by qualified name), by the module it loaded: the draft classes drop it."""
    from vllm.model_executor.models.utils import AutoWeightsLoader

    if getattr(AutoWeightsLoader.load_weights, "_eyas", False):
        return
    original = AutoWeightsLoader.load_weights

    def load_weights(self, weights, *, mapper=None):
        loaded = original(self, weights, mapper=mapper)
        STATE["loaded"][id(self.module)] = set(loaded)
        return loaded

    load_weights._eyas = True  # type: ignore[attr-defined]
    AutoWeightsLoader.load_weights = load_weights


def _init_distributed() -> None:
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    if STATE["distributed"]:
        return
    port = int(os.environ.get("EYAS_PROBE_PORT", "29517"))
    init_distributed_environment(
        world_size=1,
        rank=0,
        local_rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        backend="gloo",
    )
    ensure_model_parallel_initialized(1, 1)
    STATE["distributed"] = True


def _not_loaded_by_design(name: str) -> bool:
    """Parameters no checkpoint fills: `MLAAttention.process_weights_after_loading` derives
    `W_UK_T` / `W_UV` from the loaded `kv_b_proj`; DFlash's `mask_embedding` is read only from a
    separate `mask_embedding.pt` (`DFlashQwen3ForCausalLM._read_mask_embedding`; without one its
    `load_weights` maps the name away and the mask token's own embedding is used)."""
    return name.endswith((".W_UK_T", ".W_UV")) or name == "model.mask_embedding"


def _allow_candidate_heads_without_runner() -> None:
    """vLLM refuses a DFlash2 drafter unless its V2 model runner (Triton) drafts with it
    (`config/vllm.py` `_get_v1_model_runner_unsupported_features`: "DFlash candidate-head
    drafts"): a runner feature, not a loader rule. This probe builds the model classes that
    runner would, without a runner, so a DFlash2 export is loaded and checked on CPU too."""
    from vllm.config.vllm import VllmConfig

    unsupported = VllmConfig._get_v1_model_runner_unsupported_features
    if getattr(unsupported, "eyas_allows_candidate_heads", False):
        return

    def without_candidate_heads(self) -> list:
        return [f for f in unsupported(self) if f != "DFlash candidate-head drafts"]

    without_candidate_heads.eyas_allows_candidate_heads = True  # type: ignore[attr-defined]
    VllmConfig._get_v1_model_runner_unsupported_features = without_candidate_heads


@contextlib.contextmanager
def draft_model(case: dict) -> Iterator[tuple[Any, Any, dict]]:
    """(vLLM's draft model, its VllmConfig, what vLLM made of the export), with that config
    current (vLLM's layers read it when they run)."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.spec_decode.llm_base_proposer import get_draft_load_config
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    _record_loaded_weights()
    _allow_candidate_heads_without_runner()
    # the loader frees accelerator memory after loading; a CPU process has no accelerator (a
    # vLLM CPU server never reaches that call from its worker)
    if not torch.cuda.is_available():
        torch.accelerator.empty_cache = lambda: None
    if case.get("speculative_config") is None:  # `vllm serve EXPORT`
        model, speculative = case["drafter"], None
    else:
        model = case["target"]
        speculative = {"model": case["drafter"], **case["speculative_config"]}
    args = EngineArgs(
        model=model,
        speculative_config=speculative,
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype=case.get("dtype", "float32"),
        max_model_len=case.get("max_model_len", 2048),
        language_model_only=case.get("language_model_only", False),
        trust_remote_code=False,
        # MLA on an AMX CPU: vLLM prefers AMX_MLA, which takes no float32; a float32 drafter
        # asks for the reference CPU_MLA backend (eyas's `FLOAT32_MLA_ARGS`)
        attention_backend=case.get("attention_backend"),
    )
    vllm_config = args.create_engine_config()
    spec_cfg = vllm_config.speculative_config
    with set_current_vllm_config(vllm_config):
        _init_distributed()
        draft = get_model(
            vllm_config=vllm_config,
            model_config=spec_cfg.draft_model_config,
            load_config=get_draft_load_config(vllm_config),
        ).eval()
        # which target layers are fused: the V1 model runner's reader (the runner the CPU build
        # runs: V2 needs Triton) and the V2 runner's; None means the target model's own default
        runner = types.SimpleNamespace(speculative_config=spec_cfg)
        v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(runner)
        v2 = get_eagle3_aux_layers_from_config(spec_cfg)
        params = sorted(name for name, _ in draft.named_parameters())
        filled = STATE["loaded"].get(id(draft), set()) | set(filter(_not_loaded_by_design, params))
        meta = {
            "architecture": type(draft).__name__,
            "method": spec_cfg.method,
            "num_speculative_tokens": spec_cfg.num_speculative_tokens,
            "aux_layers": list(v1) if v1 else None,
            "aux_layers_v2_runner": list(v2) if v2 else None,
            "draft_vocab_size": getattr(draft.config, "draft_vocab_size", None),
            "target_vocab_size": vllm_config.model_config.get_vocab_size(),
            "has_draft_id_to_target_id": getattr(draft, "draft_id_to_target_id", None) is not None,
            "parameters": params,
            # parameters no shipped tensor filled: the proposer shares the target's embedding and
            # head into a drafter that ships none (`has_own_embed_tokens` / `has_own_lm_head`,
            # `llm_base_proposer.py` `_maybe_share_embeddings` / `_maybe_share_lm_head`); any other
            # would be served at its initial value
            "unfilled": sorted(set(params) - filled),
            "shares_target_embedding": not getattr(draft, "has_own_embed_tokens", False),
            "shares_target_lm_head": not getattr(draft, "has_own_lm_head", False),
        }
        yield draft, vllm_config, meta


def run_case(case: dict) -> dict:
    """What vLLM made of one export, or the error it raised building it."""
    try:
        with draft_model(case) as (_, _, meta):
            return {"loaded": True, **meta}
    except Exception as exc:  # the export is what is being judged: any refusal is reported
        return {"loaded": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}


def main(spec_path: str) -> None:
    import vllm

    with open(spec_path) as f:
        spec = json.load(f)
    cases = [run_case(case) for case in spec["cases"]]
    print("JSON" + json.dumps({"vllm": vllm.__version__, "cases": cases}))


if __name__ == "__main__":
    main(sys.argv[1])
