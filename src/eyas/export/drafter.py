"""Export a trained drafter in the layouts SGLang and vLLM load, whatever its method.

    eyas export drafter --checkpoint runs/x/drafter --format sglang --out exports/sglang
    eyas export drafter --checkpoint runs/x/drafter --step 400 --format vllm --out exports/s400
    eyas export drafter --checkpoint runs/x/drafter --format vllm --out exports/vllm
    eyas export drafter --checkpoint runs/x/d31 --format sglang --engine-version 0.5.23 --out e
    eyas export check exports/sglang --target /models/Kimi-K2.5

The drafter's method writes the layout (its writer for the engine, `DraftMethod.layouts`,
looked up by (method, engine) in `eyas.drafter.registry.LAYOUTS`: EAGLE-3 as SGLang's
`LlamaForCausalLMEagle3` or speculators `eagle3`; EAGLE-3.1 with `fc_norm` / `norm_output`,
for SGLang only with `--engine-version` 0.5.12 or later (older SGLang would serve another
model); DFlash as z-lab's
`DFlashDraftModel` or speculators `dflash`); the validator runs after every export.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, get_args

from safetensors.torch import save_file

from eyas import __version__
from eyas.drafter.load import load_drafter, resolve_drafter_dir
from eyas.drafter.registry import layout_writer, method_of
from eyas.errors import EyasError
from eyas.export.config import ExportFormat
from eyas.hf_models import TargetModel, target_model
from eyas.jsonl import read_json_object

EXPORT_FORMATS = get_args(ExportFormat)


def _target(target_dir: Path) -> TargetModel | None:
    return target_model(target_dir) if (target_dir / "config.json").exists() else None


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
    engine_version: str | None = None,
) -> Path:
    """Write `config.json` and `model.safetensors` for `fmt`; the validator runs after.

    `checkpoint` is anything `load_drafter` reads: an `eyas train --out` dir (or one of its
    checkpoints with `step`), eyas's drafter dir, or an SGLang/speculators export.
    `engine_version` is the serving engine's version, for layouts that depend on it.
    """
    if fmt not in EXPORT_FORMATS:
        raise EyasError("bad_flag", f"--format is one of {EXPORT_FORMATS}, not {fmt!r}")
    folder = resolve_drafter_dir(checkpoint, step)
    meta = _provenance(folder)
    target_path = Path(target_dir or meta.get("target_dir") or "")
    model = load_drafter(folder, "cpu", target_dir=target_dir or meta.get("target_dir"))
    method = method_of(model)
    target = _target(target_path)
    aux = list(model.config.aux_layer_ids)
    # a drafter trained on another order than the engines' (earlier eyas kept --aux-layers as
    # given) would be served its fused states permuted: refused, not exported
    method.check_aux_layers(aux, target.num_layers if target else max(aux) + 1)
    write = layout_writer(method, fmt)  # the (method, engine) pair's layout, or its refusal
    config, tensors = write(
        model,
        target=target,
        target_name=str(target_path),
        speculative_tokens=speculative_tokens,
        engine_version=engine_version,
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "eyas_export.json").write_text(
        json.dumps(
            {
                "format": fmt,
                "method": model.config.method,
                "eyas_version": __version__,
                "source_checkpoint": str(folder),
                "target_dir": str(target_path) if str(target_path) != "." else None,
                "training_p99_len": meta.get("training_p99_len"),
                "training_max_len": meta.get("training_max_len"),
            },
            indent=2,
        )
        + "\n"
    )
    return out
