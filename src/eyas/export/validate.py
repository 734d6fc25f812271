"""The export validator: run on every export and as `eyas export check DIR`.

The drafter's method (found by the loader's rule) says which tensors SGLang and vLLM load for
its layout (`DraftMethod.expected_tensors`); the validator checks their presence, shapes,
dtypes and values: a shipped embedding must equal the target's (random embeddings: bug class
#50), d2t/t2d must agree, the fused layer ids must lie inside the target's depth and be the
layers the drafter was trained on, and `max_position_embeddings` must cover the training
data's p99 length (bug class #48). With `engine`, the layout must be one that engine reads as
trained (`cross_engine_problems`): eyas marks each export with the engine it is for.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.backends.vllm import loader as vllm_loader
from eyas.drafter.method import DrafterLoadError
from eyas.drafter.registry import method_reading
from eyas.errors import EyasError, RefusedError, unreadable
from eyas.hf_models import TargetModel, target_model
from eyas.jsonl import read_json_object


class ExportError(RefusedError):
    def __init__(self, problems: list[str]):
        super().__init__("invalid_export", "invalid export:\n  " + "\n  ".join(problems))
        self.problems = problems


def _target_embedding(target: TargetModel) -> torch.Tensor | None:
    return target.load_tensors("embed")[0].get("embed")


def layout_engine(cfg: dict) -> str:
    """The engine a config's layout is for: speculators configs are vLLM's, the rest
    (`LlamaForCausalLMEagle3`, z-lab's `DFlashDraftModel`) SGLang's."""
    if vllm.EAGLE3_MLA_ARCHITECTURE in (cfg.get("architectures") or []):
        return "vllm"  # the MLA EAGLE-3 class only vLLM registers under this name
    return "vllm" if cfg.get(vllm.SPECULATORS_TYPE_KEY) else "sglang"


def cross_engine_problems(cfg: dict, engine: str) -> tuple[list[str], list[str]]:
    """(problems, warnings) of serving `cfg`'s layout on `engine`."""
    layout = layout_engine(cfg)
    marked = (cfg.get("eyas") or {}).get("engine")
    if engine == layout:
        return [], []
    where = f"an {layout} layout" + (f" (eyas export for {marked})" if marked else "")
    if engine == "sglang" and layout == "vllm" and not cfg.get(vllm.SPECULATORS_TYPE_KEY):
        # `kimi_k25_eagle3.py` registers only Eagle3DeepseekV2ForCausalLM (EntryClass)
        return [
            f"{where}: SGLang registers no {cfg.get('architectures')}; export --format sglang"
        ], []
    if engine == "sglang":
        # SGLang registers neither Eagle3Speculator nor DFlashSpeculator (its model registry,
        # python/sglang/srt/models/*.py `EntryClass`)
        return [f"{where}: SGLang does not load speculators configs; export --format sglang"], []
    if cfg.get("architectures") in ([sglang.EAGLE3_ARCHITECTURE], [sglang.EAGLE3_MLA_ARCHITECTURE]):
        # vLLM's registry maps LlamaForCausalLMEagle3 to Eagle3LlamaForCausalLM; its V1 model
        # runner (`GPUModelRunner._get_eagle3_aux_layers_from_config`) reads eagle_config's
        # ids as the HF index, its V2 runner (`eagle3_utils.get_eagle3_aux_layers_from_config`)
        # not at all (the target's default layers instead); checked in vLLM 0.32
        ids = (cfg.get(sglang.EAGLE_CONFIG_KEY) or {}).get(sglang.AUX_IDS_KEY)
        return [
            f"{where}: vLLM would capture HF layers {ids} (V1 runner) or the target's default "
            "layers (V2 runner), not the layers SGLang reads these ids as; export --format vllm"
        ], []
    # z-lab's DFlash layout: vLLM adds one to dflash_config.target_layer_ids
    # (`v1/worker/gpu/spec_decode/eagle/eagle3_utils.py`, checked in vLLM 0.22 to 0.32)
    return [], [
        f"{where}: vLLM >= 0.22 reads dflash_config.target_layer_ids as SGLang does; an older "
        "vLLM (before vllm#40727) fused them one layer off"
    ]


def find_engine_python(given: str | Path | None) -> Path | None:
    """The python whose engine's own loader builds an export in `eyas export check`: the one
    given, else this one when it imports vLLM (the engine whose loader eyas can run), else
    None (the restated loader only)."""
    return vllm_loader.find_python(Path(given) if given is not None else None)


def check_export(
    path: str | Path,
    target_dir: str | Path | None = None,
    engine: str | None = None,
    engine_python: str | Path | None = None,
) -> dict:
    """Return a summary, or raise ExportError listing every problem found. With `engine_python`
    (a python that imports the engine: vLLM, `find_engine_python`), an export for vLLM is also built by vLLM's own loader
    (`eyas.backends.vllm.loader`); the summary's `engine_loader` says what ran."""
    path = Path(path)
    problems: list[str] = []
    if not path.is_dir():
        state = "is a file, not a folder" if path.exists() else "does not exist"
        raise EyasError("no_input", f"export directory {path} {state}")
    if not (path / "config.json").exists() or not (path / "model.safetensors").exists():
        # the wrong folder, not an export eyas refuses: a user error (exit 2)
        raise EyasError(
            "not_an_export", f"{path} is not an export: it needs config.json and model.safetensors"
        )
    cfg = read_json_object(path / "config.json")
    meta = (
        read_json_object(path / "eyas_export.json") if (path / "eyas_export.json").exists() else {}
    )
    try:
        weights = load_file(str(path / "model.safetensors"))
    except (SafetensorError, OSError) as exc:
        raise unreadable(path / "model.safetensors", "safetensors", exc) from exc
    # every layer check below is in HF `hidden_states` terms, whatever the engine writes
    try:
        method = method_reading(cfg)
    except DrafterLoadError as exc:
        raise ExportError([exc.detail]) from exc
    aux = method.exported_aux_layers(cfg)
    problems += method.layout_problems(cfg)
    warnings: list[str] = []
    if engine is not None:
        refused, warned = cross_engine_problems(cfg, engine)
        problems += refused
        warnings += warned
    layer = cfg.get("transformer_layer_config") or cfg
    h, v = layer.get("hidden_size"), layer.get("vocab_size")
    ht = cfg.get("target_hidden_size") or h
    dv = cfg.get("draft_vocab_size") or v
    expected = method.expected_tensors(cfg)
    for name, shape in expected.items():
        if name not in weights:
            problems.append(f"missing tensor {name}")
        elif tuple(weights[name].shape) != shape:
            problems.append(f"{name} has shape {tuple(weights[name].shape)}, expected {shape}")
    for name, tensor in weights.items():
        if name in ("d2t",) and tensor.dtype != torch.int64:
            problems.append(f"d2t dtype {tensor.dtype}, expected int64")
        elif name == "t2d" and tensor.dtype != torch.bool:
            problems.append(f"t2d dtype {tensor.dtype}, expected bool")
        elif name not in ("d2t", "t2d") and tensor.dtype not in (
            torch.bfloat16,
            torch.float16,
            torch.float32,
        ):
            problems.append(f"{name} dtype {tensor.dtype} is not a float type")
    loader_engine = engine or layout_engine(cfg)
    if loader_engine == "vllm":
        problems += vllm_loader.restated_problems(set(weights), set(expected), dv, v)
    if "d2t" in weights and "t2d" in weights and not problems:
        ids = torch.arange(dv) + weights["d2t"]
        if ids.min() < 0 or ids.max() >= v or not bool((ids[1:] > ids[:-1]).all()):
            problems.append("d2t maps draft ids outside the target vocabulary or out of order")
        elif not bool(weights["t2d"][ids].all()) or int(weights["t2d"].sum()) != dv:
            problems.append("t2d does not mark exactly the draft vocabulary of d2t")
    if not aux:
        problems.append("the config names no target layers to fuse")
    else:
        try:
            method.check_aux_layers(aux, max(aux) + 1)
        except EyasError as exc:
            problems.append(exc.detail)
    trained = (cfg.get("eyas") or {}).get("trained_hf_layers")
    if trained is not None and aux is not None and list(trained) != list(aux):
        problems.append(
            f"the config makes the engine feed HF layers {aux}, but the drafter was trained "
            f"on {trained}"
        )
    target_path = Path(target_dir or meta.get("target_dir") or "")
    target = target_model(target_path) if (target_path / "config.json").exists() else None
    if target is not None and aux:
        depth = target.num_layers
        # HF's last hidden state is after the final norm, the engines' before it: an id of
        # `depth` means different tensors in training and serving, so it is refused.
        if any(not 1 <= i <= depth - 1 for i in aux):
            problems.append(
                f"aux layers (HF index) {aux} outside 1..{depth - 1} (target depth {depth})"
            )
        if target.vocab_size != v:
            problems.append(f"vocab_size {v} != target's {target.vocab_size}")
        if target.hidden_size != ht:
            problems.append(f"target_hidden_size {ht} != target's {target.hidden_size}")
    embedding = _target_embedding(target) if target is not None else None
    if embedding is not None and "embed_tokens.weight" in weights:
        mine = weights["embed_tokens.weight"]
        if mine.shape != embedding.shape or not torch.equal(mine, embedding.to(mine.dtype)):
            problems.append("embed_tokens.weight differs from the target's input embedding")
    loader = _engine_loader(path, cfg, method, loader_engine, target, engine_python, aux)
    problems += loader.pop("problems")
    p99 = meta.get("training_p99_len")
    mpe = layer.get("max_position_embeddings")
    if p99 and mpe and mpe < p99:
        problems.append(f"max_position_embeddings {mpe} < training p99 length {p99}")
    if problems:
        raise ExportError(problems)
    return {
        "path": str(path),
        "tensors": len(weights),
        "draft_vocab_size": dv,
        "aux_layers_hf": aux,
        "aux_layer_rule": method.aux_layer_rule(cfg),
        "max_position_embeddings": mpe,
        "embedding_checked": embedding is not None and "embed_tokens.weight" in weights,
        "method": (cfg.get("eyas") or {}).get("method") or method.name,
        "layout": layout_engine(cfg),
        "engine_loader": loader,
        "warnings": warnings,
    }


def _engine_loader(
    path: Path,
    cfg: dict,
    method,
    engine: str,
    target: TargetModel | None,
    engine_python: str | Path | None,
    trained: list[int] | None,
) -> dict:
    """Run the engine's own loader on the export where it can run: {"ran": bool, "engine",
    "why" or "version", "problems"}."""
    if engine != "vllm":
        why = (
            "SGLang's loader runs only inside SGLang (no CPU build): checked against eyas's "
            "restatement of it, pinned by tests that run SGLang's own code from its wheels"
        )
        return {"ran": False, "engine": engine, "why": why, "problems": []}
    if engine_python is None:
        why = (
            "no vLLM importable here (pass --engine-python PY): checked against eyas's "
            "restatement of vLLM's loader"
        )
        return {"ran": False, "engine": "vllm", "why": why, "problems": []}
    if target is None:
        why = "the target is unknown (pass --target): vLLM builds the drafter beside it"
        return {"ran": False, "engine": "vllm", "why": why, "problems": []}
    try:
        case = vllm_loader.loader_case(path, cfg, method, target)
    except EyasError as exc:  # a config no vLLM server could be started with
        return {"ran": False, "engine": "vllm", "why": exc.detail, "problems": [exc.detail]}
    version, (result,) = vllm_loader.run_cases(Path(engine_python), [case])
    problems = vllm_loader.loader_problems(version, result, trained)
    summary = {"ran": True, "engine": "vllm", "version": version, "loaded": result["loaded"]}
    if result["loaded"]:
        summary["architecture"] = result["architecture"]
    return {**summary, "problems": problems}
