"""DFlash2 layouts: DFlash's (`eyas.drafter.dflash.export`) under DFlash2's names, with the
convolution and selector keys (`eyas.backends.vllm.conventions.DFLASH2_KEYS`):

- vLLM (`--format vllm`): speculators `dflash2`, the keys at the top level, which
  `update_dflash2` copies into `dflash_config`;
- SGLang (`--format sglang`): z-lab's `DFlash2DraftModel`, the keys in `dflash_config`, where
  SGLang's `parse_dflash_draft_config` (and vLLM) read them; SGLang serves it from
  `DFLASH2_SINCE` on, so only for an `--engine-version` that says so.

Every tensor but the target's embedding and head ships (the engines take the head's top K for
the candidates). Both engines size the convolution's block from the server's draft count:
vLLM `1 + num_speculative_tokens`, SGLang `--speculative-num-draft-tokens` (the block).
"""

from __future__ import annotations

from typing import Any

from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.dflash import export as dflash
from eyas.drafter.dflash2.model import DFlash2Config
from eyas.drafter.method import DrafterLoadError, unsupported_export
from eyas.hf_models import TargetModel


def _keys(d: DFlash2Config) -> dict[str, int]:
    return {k: int(getattr(d, k)) for k in vllm.DFLASH2_KEYS}


def speculators_config(
    d: DFlash2Config, target: TargetModel | None, target_name: str, speculative_tokens: int
) -> dict:
    config = dflash.speculators_config(d, target, target_name, speculative_tokens)
    config.update(
        {
            "architectures": [vllm.DFLASH2_ARCHITECTURE],  # speculators' DFlash2 config's own
            vllm.SPECULATORS_TYPE_KEY: vllm.DFLASH2_TYPE,
            **_keys(d),
        }
    )
    config["speculators_config"]["algorithm"] = vllm.DFLASH2_TYPE
    config["eyas"]["method"] = "dflash2"
    return config


def zlab_config(
    d: DFlash2Config, target: TargetModel | None, engine_version: str | None = None
) -> dict:
    gap = sglang.version_gap(engine_version, sglang.DFLASH2_SINCE)
    if gap:
        raise unsupported_export(
            "dflash2",
            "sglang",
            f"SGLang registers DFlash2DraftModel from {sglang.DFLASH2_SINCE} on "
            f"(python/sglang/srt/models/dflash.py); an older one cannot load it ({gap}). Give "
            f"--engine-version with the SGLang that serves it ({sglang.DFLASH2_SINCE} or later), "
            "or export --format vllm",
        )
    config = dflash.zlab_config(d, target)
    config["architectures"] = [sglang.DFLASH2_ARCHITECTURE]
    config[sglang.DFLASH_CONFIG_KEY].update(_keys(d))
    config["eyas"].update(method="dflash2", min_sglang_version=sglang.DFLASH2_SINCE)
    return config


def read_config(cfg: dict) -> DFlash2Config:
    """Either layout (the keys at the top level or in `dflash_config`), any writer's."""
    base = dflash.read_config(cfg)
    nested = cfg.get(sglang.DFLASH_CONFIG_KEY) or {}
    keys = {k: cfg.get(k, nested.get(k)) for k in vllm.DFLASH2_KEYS}
    missing = [k for k, v in keys.items() if not v]
    if missing:
        raise DrafterLoadError(f"the DFlash2 config names no {', '.join(missing)}")
    fields = {k: getattr(base, k) for k in base.__dataclass_fields__}
    try:
        return DFlash2Config(**fields, **{k: int(v) for k, v in keys.items()})
    except ValueError as exc:
        raise DrafterLoadError(f"not a DFlash2 drafter eyas can build: {exc}") from exc


def expected_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    out = dflash.expected_tensors(cfg)
    layer = dflash.layer_config(cfg)
    d = read_config(cfg)
    h, v = layer.get("hidden_size"), layer.get("vocab_size")
    kernels = 2 * d.conv_kernel_size * (h // d.conv_group_size)
    for i in range(int(layer.get("num_hidden_layers") or 0)):
        for conv in ("attention_conv", "mlp_conv"):
            p = f"layers.{i}.{conv}."
            out[p + "base_kernel"] = (2, d.conv_kernel_size, h)
            out[p + "kernel_projection.weight"] = (kernels, h)
    p = "candidate_selector."
    out[p + "predecessor_codebook"] = (v, d.selector_rank)
    out[p + "successor_codebook"] = (v, d.selector_rank)
    out[p + "hidden_projection.weight"] = (d.selector_rank, h)
    return out


def exported_tensors(model: Any) -> dict[str, Any]:
    return dflash.exported_tensors(model)
