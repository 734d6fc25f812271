"""Checkpoints, sharded: every rank writes and reads its own shard through
`torch.distributed.checkpoint` (DCP), so no rank gathers the model and a checkpoint resumes at
any world size, under FSDP2, DDP or one process. The frozen tensors copied from the target (the
embedding; DFlash's head) are never saved: a resume re-reads them from the target.

Layout: `OUT/checkpoints/step-NNNNNNN/` with `dcp/` (DCP's `.metadata` and one `__R_0.distcp`
file per rank: the trainable weights, buffers such as d2t/t2d, and the optimizer state, keyed by
parameter name), `trainer.pt` (scheduler and RNG, read back with `weights_only=True`),
`drafter_config.json` (what `eyas export` needs besides the weights) and `state.json` (step,
data position, world size). A checkpoint is written into `.step-NNNNNNN.tmp/`, fsynced and
renamed, so a killed run never leaves a half-written `step-*` folder; `latest` names the newest.
After each commit only the newest `keep_last` are kept.

Checkpoints of eyas before 0.10 (`model.safetensors` + `optimizer.pt`, written whole by rank 0)
still load.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from eyas.drafter.dcp import one_process_ok


def _trainable_names(model) -> list[str]:
    """Parameter names in the optimizer's order (it is built from the trainable parameters)."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def _rekey(state: dict, key: dict) -> dict:
    return {
        "state": {key[k]: v for k, v in state["state"].items()},
        "param_groups": [
            {**g, "params": [key[k] for k in g["params"]]} for g in state["param_groups"]
        ],
    }


def _keyed_by_position(state: dict) -> bool:
    return all(isinstance(k, int) for g in state["param_groups"] for k in g["params"])


def _by_name(model, state: dict) -> dict:
    """Optimizer state keyed by parameter name instead of position: the layout
    torch.distributed.checkpoint writes for FSDP2, so one checkpoint resumes in any mode.
    (Checkpoints of earlier eyas versions are keyed by position.)"""
    if not _keyed_by_position(state):
        return state
    return _rekey(state, dict(enumerate(_trainable_names(model))))


def _by_index(model, state: dict) -> dict:
    if _keyed_by_position(state):
        return state
    return _rekey(state, {n: i for i, n in enumerate(_trainable_names(model))})


def full_state(model, optimizer=None, sharded: bool = False) -> tuple[dict, dict | None]:
    """Unsharded model state and name-keyed optimizer state. With FSDP2 the parameters are
    DTensor shards and gathering them is a collective: every rank must call this; rank 0 gets
    the tensors (cpu_offload), the others empty dicts."""
    if not sharded:
        optim_state = _by_name(model, optimizer.state_dict()) if optimizer else None
        return model.state_dict(), optim_state
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(model, options=opts)
    optim_state = (
        get_optimizer_state_dict(model, optimizer, options=opts) if optimizer is not None else None
    )
    return model_state, optim_state


def save_drafter(
    model: nn.Module, out: Path, extra: dict[str, Any], state: dict | None = None
) -> None:
    """Weights (including the frozen tensors copied from the target) and the config with its
    method; `state` is the gathered state dict when the model is sharded."""
    out.mkdir(parents=True, exist_ok=True)
    state = model.state_dict() if state is None else state
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    save_file(state, str(out / "model.safetensors"))
    (out / "drafter_config.json").write_text(
        json.dumps({"method": model.config.method, **model.config.to_dict(), **extra}, indent=2)
        + "\n"
    )


def save_whole_checkpoint(
    root: Path,
    step: int,
    model,
    optimizer,
    scheduler,
    state: dict,
    gathered: tuple[dict, dict | None] | None = None,
) -> Path:
    """The layout of eyas < 0.10 (rank 0 writes everything, the frozen tensors included);
    kept so the tests can check such checkpoints still resume. `gathered` is `full_state(...)`
    when the model is sharded."""
    model_state, optim_state = gathered or full_state(model, optimizer)
    final = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_drafter(model, tmp, {}, model_state)
    torch.save(
        {
            "optimizer": optim_state,
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
        },
        tmp / "optimizer.pt",
    )
    (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest = root / "latest.tmp"
    latest.write_text(final.name)
    os.replace(latest, root / "latest")
    return final


STATE_FILE = "state.json"


def _step_of(path: Path) -> int:
    return int(path.name.removeprefix("step-"))


def _complete(path: Path) -> bool:
    """A committed checkpoint: sharded (DCP metadata) or whole (eyas < 0.10), with its state."""
    if not (path / STATE_FILE).exists():
        return False
    return (path / "dcp" / ".metadata").exists() or (path / "model.safetensors").exists()


def checkpoints(root: Path) -> list[Path]:
    """Committed checkpoints, oldest first (temporary `.step-*.tmp` folders are not)."""
    found = [p for p in root.glob("step-*") if p.is_dir() and p.name[5:].isdigit()]
    return sorted((p for p in found if _complete(p)), key=_step_of)


def latest_checkpoint(root: Path) -> Path | None:
    """The one `latest` names when it is committed (a user may point it back), else the newest
    committed one: a kill between the rename and the pointer's update loses nothing."""
    pointer = root / "latest"
    if pointer.exists():
        named = root / pointer.read_text().strip()
        if named.name.startswith("step-") and _complete(named):
            return named
    done = checkpoints(root)
    return done[-1] if done else None


def frozen_names(model: nn.Module) -> set[str]:
    """Parameters that are the target's (requires_grad False): never saved, re-read on resume."""
    return {name for name, p in model.named_parameters() if not p.requires_grad}


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _barrier() -> None:
    import torch.distributed as dist

    if _distributed():
        dist.barrier()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """Flush every file and folder under `path` to storage before the rename commits it."""
    for p in [*sorted(path.rglob("*"), reverse=True), path]:
        _fsync(p)


def _trainable_state(model: nn.Module, optimizer) -> dict:
    """This rank's shard of the model (DTensors under FSDP2, whole tensors otherwise) less the
    frozen tensors, and the optimizer state keyed by parameter name."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    frozen = frozen_names(model)
    return {
        "model": {k: v for k, v in model_state.items() if k not in frozen},
        "optim": optim_state,
    }


def save_sharded(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer,
    scheduler,
    state: dict,
    config: dict,
    keep_last: int,
    rank: int,
) -> Path:
    """Collective: every rank writes its shard; rank 0 commits, then applies retention."""
    import torch.distributed.checkpoint as dcp

    final = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "dcp").mkdir(parents=True)
    _barrier()
    writer = dcp.FileSystemWriter(str(tmp / "dcp"), sync_files=True)
    with one_process_ok():
        dcp.save(
            _trainable_state(model, optimizer), storage_writer=writer, no_dist=not _distributed()
        )
    _barrier()  # every shard is on storage
    if rank == 0:
        torch.save(
            {"scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state()},
            tmp / "trainer.pt",
        )
        (tmp / "drafter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
        _fsync_tree(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        _fsync(root)
        pointer = root / "latest.tmp"
        pointer.write_text(final.name)
        os.replace(pointer, root / "latest")
        prune(root, keep_last)
    _barrier()  # no rank runs ahead of the commit (a kill now finds it committed)
    return final


def prune(root: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` committed checkpoints (0 keeps all), and the
    temporary folders of writes a kill interrupted. Returns what was deleted."""
    removed = [p for p in root.glob(".step-*.tmp") if p.is_dir()]
    done = checkpoints(root)
    if keep_last:
        removed += done[:-keep_last]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def load_sharded(path: Path, model: nn.Module, optimizer, scheduler) -> dict:
    """Collective: each rank reads the slices of its own shard (DCP reshards when the world
    size or the wrapping differs from the run that wrote it); the frozen tensors keep the
    values setup copied from the target."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    state = _trainable_state(model, optimizer)
    reader = dcp.FileSystemReader(str(path / "dcp"))
    with one_process_ok():
        dcp.load(state, storage_reader=reader, no_dist=not _distributed())
    # strict=False: the frozen tensors are absent on purpose (dcp.load already failed on any
    # requested tensor the checkpoint lacks)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=StateDictOptions(strict=False),
    )
    blob = torch.load(path / "trainer.pt", weights_only=True)
    scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    return json.loads((path / STATE_FILE).read_text())


def _saved_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """The model tensors a checkpoint holds and their (global) shapes, read from its metadata
    (DCP's `.metadata`, or the safetensors header of a whole checkpoint): no tensor is loaded."""
    if (path / "dcp").is_dir():
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        meta = dcp.FileSystemReader(str(path / "dcp")).read_metadata().state_dict_metadata
        return {
            k.removeprefix("model."): tuple(m.size)
            for k, m in meta.items()
            if k.startswith("model.") and isinstance(m, TensorStorageMetadata)
        }
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 (no __iter__)


# what a drafter config records besides its structure: they may differ on resume
_NOT_STRUCTURE = {"extra", "eyas_version", "target_dir", "vocab", "max_position_embeddings"}


def resume_mismatch(path: Path, model: nn.Module, config: dict) -> str | None:
    """Why the checkpoint at `path` cannot resume into `model`, else None. DCP loads only the
    tensors it is asked for, so a run whose options build another drafter (a different
    `--draft-vocab`, the draft head frozen instead of trained, another method) would fail deep
    in DCP on a shape, or worse resume silently without a tensor the checkpoint holds. The
    options that differ (the saved `drafter_config.json` against `config`) name the cause."""
    saved = _saved_shapes(path)
    whole = not (path / "dcp").is_dir()  # a whole checkpoint holds the frozen tensors too
    frozen = set() if whole else frozen_names(model)
    now = {k: tuple(v.shape) for k, v in model.state_dict().items() if k not in frozen}
    shapes = [
        f"{k} {list(saved[k])} saved, {list(now[k])} now"
        for k in sorted(now.keys() & saved.keys())
        if saved[k] != now[k]
    ]
    missing = sorted(now.keys() - saved.keys())
    extra = sorted(saved.keys() - now.keys())
    if not (shapes or missing or extra):
        return None
    parts = shapes[:3]
    if missing:
        parts.append(f"not in the checkpoint: {', '.join(missing[:3])}")
    if extra:
        parts.append(f"in the checkpoint, not in this drafter: {', '.join(extra[:3])}")
    was_file = path / "drafter_config.json"
    was = json.loads(was_file.read_text()) if was_file.exists() else {}
    now_cfg = json.loads(json.dumps(config))  # as the file holds it (tuples as lists)
    options = [
        f"{k} {was[k]!r} saved, {now_cfg[k]!r} now"
        for k in sorted(was.keys() & now_cfg.keys() - _NOT_STRUCTURE)
        if was[k] != now_cfg[k]
    ]
    why = f" ({'; '.join(options)})" if options else ""
    return (
        f"{path} holds another drafter than this run builds{why}: {'; '.join(parts)}. "
        "Resume with the options the run was started with, or train into a new --out"
    )


def load_checkpoint(path: Path, model, optimizer, scheduler, sharded: bool = False) -> dict:
    """A sharded checkpoint (`load_sharded`), or a whole one of eyas < 0.10: every rank reads
    the file; with FSDP2 each keeps its own shard."""
    if (path / "dcp").is_dir():
        return load_sharded(path, model, optimizer, scheduler)
    weights = load_file(str(path / "model.safetensors"))
    blob = torch.load(path / "optimizer.pt", weights_only=True)
    if sharded:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, strict=True)
        set_model_state_dict(model, weights, options=opts)
        set_optimizer_state_dict(model, optimizer, _by_name(model, blob["optimizer"]), options=opts)
    else:
        model.load_state_dict(weights, strict=True)
        optimizer.load_state_dict(_by_index(model, blob["optimizer"]))
    scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    return json.loads((path / "state.json").read_text())
