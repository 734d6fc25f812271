"""Load any EAGLE-3 drafter a user can pass:

- the directory `eyas train --out` wrote (its final `drafter/`, or `step=N` for a checkpoint);
- eyas's own drafter directory (`drafter_config.json` + `model.safetensors`);
- an SGLang export (`LlamaForCausalLMEagle3` config) or a speculators export (`Eagle3Speculator`,
  `speculators_model_type: eagle3`), including ones eyas did not write: the config is read
  from the format's documented keys, the decoder layer may be named `midlayer.` or `layers.0.`,
  and a missing embedding (servers take it from the target) is read from the target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.model import DrafterConfig, Eagle3Drafter
from eyas.errors import EyasError, unreadable
from eyas.hf_models import target_model
from eyas.jsonl import read_json_object


class DrafterLoadError(EyasError):
    def __init__(self, detail: str):
        super().__init__("bad_drafter", detail)


def resolve_drafter_dir(path: str | Path, step: int | None = None) -> Path:
    """The directory holding the drafter's weights, from any of the accepted layouts."""
    path = Path(path)
    if not path.is_dir():
        state = "is a file, not a folder" if path.exists() else "does not exist"
        raise DrafterLoadError(f"drafter directory {path} {state}")
    if step is not None:
        ckpt = path / "checkpoints" / f"step-{step:07d}"
        if not ckpt.is_dir():
            have = sorted(p.name for p in (path / "checkpoints").glob("step-*"))
            raise DrafterLoadError(f"no checkpoint for step {step} in {path} (have {have})")
        return ckpt
    if (path / "drafter_config.json").exists() or (path / "config.json").exists():
        return path
    if (path / "drafter" / "drafter_config.json").exists():
        return path / "drafter"
    if (path / "checkpoints").is_dir():
        raise DrafterLoadError(
            f"{path} has checkpoints but no final drafter/ (training unfinished?): pass --step N"
        )
    raise DrafterLoadError(
        f"{path} is not a drafter: expected an `eyas train --out` dir, a drafter dir with "
        "drafter_config.json, or an SGLang/speculators export with config.json"
    )


def _layer_fields(layer: dict[str, Any]) -> dict[str, Any]:
    rope = layer.get("rope_theta") or (layer.get("rope_parameters") or {}).get("rope_theta")
    hidden, heads = layer["hidden_size"], layer["num_attention_heads"]
    return {
        "hidden_size": hidden,
        "intermediate_size": layer["intermediate_size"],
        "num_attention_heads": heads,
        "num_key_value_heads": layer.get("num_key_value_heads", heads),
        "vocab_size": layer["vocab_size"],
        "head_dim": layer.get("head_dim") or hidden // heads,
        "max_position_embeddings": layer.get("max_position_embeddings", 4096),
        "rms_norm_eps": layer.get("rms_norm_eps", 1e-6),
        "rope_theta": float(rope or 10000.0),
    }


def exported_aux_layers(cfg: dict[str, Any]) -> list[int] | None:
    """The HF `hidden_states` indices an SGLang or speculators config makes the engine feed
    the drafter (SGLang's ids are HF index - 1; speculators/vLLM's are the HF index)."""
    if cfg.get(vllm.SPECULATORS_TYPE_KEY):
        ids = cfg.get(vllm.AUX_IDS_KEY)
        return vllm.from_vllm_layer_ids(ids) if ids else None
    ids = (cfg.get(sglang.EAGLE_CONFIG_KEY) or {}).get(sglang.AUX_IDS_KEY)
    return sglang.from_sglang_layer_ids(ids) if ids else None


def exported_config(cfg: dict[str, Any]) -> DrafterConfig:
    """A DrafterConfig from an SGLang or speculators `config.json`; aux ids in HF terms."""
    aux = exported_aux_layers(cfg)
    if cfg.get("speculators_model_type") == "eagle3":
        layer = cfg.get("transformer_layer_config") or {}
        for unsupported in ("norm_before_fc", "fc_norm", "norm_output"):
            if cfg.get(unsupported):
                raise DrafterLoadError(f"speculators option {unsupported} is not supported")
        # read as vLLM reads it: an absent key means True
        extra = {
            "norm_before_residual": bool(
                cfg.get("norm_before_residual", vllm.NORM_BEFORE_RESIDUAL_DEFAULT)
            )
        }
    elif sglang.EAGLE3_ARCHITECTURE in (cfg.get("architectures") or []):
        layer = cfg
        extra = {}
    else:
        raise DrafterLoadError(
            f"unknown drafter config: architectures={cfg.get('architectures')}; expected "
            "LlamaForCausalLMEagle3 (SGLang) or speculators eagle3"
        )
    if layer.get("num_hidden_layers", 1) != 1:
        raise DrafterLoadError(
            f"drafters with {layer.get('num_hidden_layers')} decoder layers are not supported"
        )
    fields = _layer_fields(layer)
    if not aux:
        raise DrafterLoadError(
            "the config names no eagle_aux_hidden_state_layer_ids: which target layers it "
            "fuses is unknown"
        )
    return DrafterConfig(
        **fields,
        draft_vocab_size=cfg.get("draft_vocab_size") or fields["vocab_size"],
        target_hidden_size=cfg.get("target_hidden_size") or fields["hidden_size"],
        aux_layer_ids=list(aux),
        **extra,
    )


def load_drafter(
    path: str | Path,
    device: str = "cpu",
    step: int | None = None,
    target_dir: str | Path | None = None,
) -> Eagle3Drafter:
    """The drafter in eval mode, float32, on `device`."""
    folder = resolve_drafter_dir(path, step)
    weights_file = folder / "model.safetensors"
    if not weights_file.exists():
        raise DrafterLoadError(f"{folder} has no model.safetensors")
    try:
        weights = load_file(str(weights_file))
    except (SafetensorError, OSError) as exc:
        raise unreadable(weights_file, "safetensors", exc) from exc
    if (folder / "drafter_config.json").exists():
        raw = read_json_object(folder / "drafter_config.json")
        fields = DrafterConfig.__dataclass_fields__
        cfg = DrafterConfig(**{k: v for k, v in raw.items() if k in fields})
    else:
        cfg = exported_config(read_json_object(folder / "config.json"))
    model = Eagle3Drafter(cfg)
    weights = {k: v.float() if v.is_floating_point() else v for k, v in weights.items()}
    if "embed_tokens.weight" not in weights:
        weights["embed_tokens.weight"] = _target_embedding(folder, target_dir)
    if "d2t" not in weights:  # a full-vocabulary head: identity mapping
        if cfg.draft_vocab_size != cfg.vocab_size:
            raise DrafterLoadError(f"{folder}: draft vocabulary without a d2t mapping")
        weights["d2t"] = torch.zeros(cfg.draft_vocab_size, dtype=torch.long)
    if "t2d" not in weights:
        t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        t2d[torch.arange(cfg.draft_vocab_size) + weights["d2t"]] = True
        weights["t2d"] = t2d
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise DrafterLoadError(
            f"{folder}: tensors missing {sorted(missing)}, unexpected {sorted(unexpected)}"
        )
    return model.to(device).eval()


def _target_embedding(folder: Path, target_dir: str | Path | None) -> torch.Tensor:
    meta = folder / "eyas_export.json"
    target = target_dir or (read_json_object(meta).get("target_dir") if meta.exists() else None)
    if target is None:
        raise DrafterLoadError(
            f"{folder} ships no embed_tokens.weight: pass the target so it can be read from it"
        )
    found, _ = target_model(target).load_tensors("embed")
    if "embed" not in found:
        raise DrafterLoadError(f"no input embedding found in {target}")
    return found["embed"].float()
