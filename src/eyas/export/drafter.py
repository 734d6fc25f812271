"""Export a trained drafter for SGLang (`LlamaForCausalLMEagle3`) and vLLM (speculators).

    eyas export drafter --checkpoint runs/x/drafter --format sglang --out exports/sglang
    eyas export drafter --checkpoint runs/x/drafter --step 400 --format vllm --out exports/s400
    eyas export drafter --checkpoint runs/x/drafter --format vllm --out exports/vllm
    eyas export check exports/sglang --target /models/Kimi-K2.5

Tensor names are the drafter's own (they already follow SGLang), so export is a save. The
config is derived from the trained drafter and the target's `config.json`, never copied from
another model (bug class #49), and carries only what was trained (no injected rope scaling,
bug class #53). The embedding is exported equal to the target's (bug class #50).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from safetensors.torch import save_file

from eyas import __version__
from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.config import ExportFormat
from eyas.drafter.load import load_drafter, resolve_drafter_dir
from eyas.errors import EyasError
from eyas.hf_models import TargetModel, target_model
from eyas.jsonl import read_json_object

EXPORT_FORMATS = get_args(ExportFormat)


def _target(target_dir: Path) -> TargetModel | None:
    return target_model(target_dir) if (target_dir / "config.json").exists() else None


def _llama_fields(d: dict, target: TargetModel | None) -> dict[str, Any]:
    fields = {
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": d["hidden_size"],
        "intermediate_size": d["intermediate_size"],
        "num_attention_heads": d["num_attention_heads"],
        "num_key_value_heads": d["num_key_value_heads"],
        "head_dim": d["head_dim"],
        "hidden_act": "silu",
        "vocab_size": d["vocab_size"],
        "max_position_embeddings": d["max_position_embeddings"],
        "rms_norm_eps": d["rms_norm_eps"],
        "rope_theta": d["rope_theta"],
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": "bfloat16",
    }
    if target is not None:
        fields.update(target.token_ids())
    return fields


def sglang_config(d: dict, target: TargetModel | None) -> dict:
    """SGLang's EAGLE-3 config. Its layer ids are HF index - 1: SGLang adds one to each."""
    return {
        "architectures": [sglang.EAGLE3_ARCHITECTURE],
        **_llama_fields(d, target),
        "draft_vocab_size": d["draft_vocab_size"],
        "target_hidden_size": d["target_hidden_size"],
        sglang.EAGLE_CONFIG_KEY: {
            sglang.AUX_IDS_KEY: sglang.to_sglang_layer_ids(d["aux_layer_ids"]),
            sglang.USE_AUX_KEY: True,
        },
        "eyas": {
            "version": __version__,
            "aux_layer_convention": "sglang: HF hidden_states index - 1",
            "trained_hf_layers": list(d["aux_layer_ids"]),
        },
    }


def vllm_config(
    d: dict, target: TargetModel | None, target_name: str, speculative_tokens: int
) -> dict:
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": "0.9.0",
        "transformer_layer_config": _llama_fields(d, target),
        "draft_vocab_size": d["draft_vocab_size"],
        "norm_before_residual": d.get("norm_before_residual", False),
        "target_hidden_size": d["target_hidden_size"],
        vllm.AUX_IDS_KEY: vllm.to_vllm_layer_ids(d["aux_layer_ids"]),
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
        "eyas": {"version": __version__},
    }


def _provenance(folder: Path) -> dict[str, Any]:
    """What eyas recorded about a drafter: its training config (eyas drafter dirs) or its
    earlier export (exported dirs)."""
    if (folder / "drafter_config.json").exists():
        d = read_json_object(folder / "drafter_config.json")
        data = d.get("data") or {}
        return {
            "target_dir": d.get("target_dir"),
            "training_p99_len": data.get("p99_len"),
            "training_max_len": data.get("max_len_seen"),
        }
    if (folder / "eyas_export.json").exists():
        return read_json_object(folder / "eyas_export.json")
    return {}


def export_drafter(
    checkpoint: str | Path,
    fmt: str,
    out: str | Path,
    target_dir: str | Path | None = None,
    speculative_tokens: int = 3,
    step: int | None = None,
) -> Path:
    """Write `config.json` and `model.safetensors` for `fmt`; the validator runs after.

    `checkpoint` is anything `load_drafter` reads: an `eyas train --out` dir (or one of its
    checkpoints with `step`), eyas's drafter dir, or an SGLang/speculators export.
    """
    import torch

    if fmt not in EXPORT_FORMATS:
        raise EyasError("bad_flag", f"--format is one of {EXPORT_FORMATS}, not {fmt!r}")
    folder = resolve_drafter_dir(checkpoint, step)
    meta = _provenance(folder)
    target_path = Path(target_dir or meta.get("target_dir") or "")
    model = load_drafter(folder, "cpu", target_dir=target_dir or meta.get("target_dir"))
    d = model.config.to_dict()
    target = _target(target_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "sglang":
        config = sglang_config(d, target)
    else:
        config = vllm_config(d, target, str(target_path), speculative_tokens)
    # bf16 for the float weights as servers load them; d2t/t2d keep their integer/bool types.
    tensors = {
        k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
        for k, v in model.state_dict().items()
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "eyas_export.json").write_text(
        json.dumps(
            {
                "format": fmt,
                "eyas_version": __version__,
                "source_checkpoint": str(folder),
                "target_dir": str(target_path),
                "training_p99_len": meta.get("training_p99_len"),
                "training_max_len": meta.get("training_max_len"),
            },
            indent=2,
        )
        + "\n"
    )
    return out
