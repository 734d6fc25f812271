"""A drafter as an engine serves it: exported in the engine's layout when it is not in one the
engine loads already, and the speculative config of that layout (its method's). `eyas eval`
hands the config to the engine's server class (`EngineServer.drafter_launch`), which turns it
into the engine's flags.

    spec = speculative_config("vllm", Path("runs/x/drafter"), target_dir, k=3, scratch=tmp)
    args = VLLMServer.drafter_launch(spec, dtype="float32")

The layouts are the method's writers, registered per (method, engine) (`DraftMethod.layouts`,
`eyas.drafter.registry.LAYOUTS`); an engine eyas writes no layout for is handed the drafter as
given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from eyas.errors import RefusedError
from eyas.export.drafter import export_drafter


def _vllm(drafter: Path, target: Path, k: int, scratch: Path) -> dict[str, Any]:
    """vLLM's `--speculative-config` for the drafter's vLLM export: its method names vLLM's
    method (`eagle3` for EAGLE-3, EAGLE-3.1 and P-EAGLE, `dflash` for DFlash and DFlash2)."""
    from eyas.backends.vllm import conventions as vllm
    from eyas.drafter.load import resolve_drafter_dir
    from eyas.drafter.registry import method_reading
    from eyas.jsonl import read_json_object

    folder = resolve_drafter_dir(drafter)
    config = folder / "config.json"
    raw = read_json_object(config) if config.exists() else {}
    # already in a layout vLLM loads: speculators format, or an MLA drafter's vLLM layout
    # (ids at the top level)
    loadable = raw.get(vllm.SPECULATORS_TYPE_KEY) or (
        vllm.is_mla_drafter(raw) and raw.get(vllm.AUX_IDS_KEY)
    )
    if not loadable:
        folder = export_drafter(folder, "vllm", scratch / "vllm-drafter", target, k)
    method = method_reading(read_json_object(folder / "config.json"))
    refusal = method.serving_refusal("vllm")  # the vLLM here cannot serve it (DFlash2 on CPU)
    if refusal:
        raise RefusedError("engine_unsupported", refusal)
    return method.speculative_configs()["vllm"](folder, k)


# the engines eyas writes a drafter layout for: (drafter, target, k, scratch) -> its config
_LAYOUTS: dict[str, Callable[[Path, Path, int, Path], dict[str, Any]]] = {"vllm": _vllm}


def speculative_config(
    engine: str, drafter: Path, target: Path, k: int, scratch: Path
) -> dict[str, Any]:
    """The speculative config that serves `drafter` on `engine` with `k` draft tokens per
    step: `model` (the drafter folder in the engine's layout, exported under `scratch` when
    needed), `num_speculative_tokens` and the method's own keys."""
    layout = _LAYOUTS.get(engine)
    if layout is None:
        return {"model": str(drafter), "num_speculative_tokens": k}
    return layout(Path(drafter), Path(target), k, scratch)


__all__ = ["speculative_config"]
