"""Checkpoints: drafter weights in safetensors; optimizer, scheduler and RNG with torch.save,
read back with `weights_only=True` (tensors and plain values only: nothing is unpickled).

Layout: `OUT/checkpoints/step-NNNNNNN/` with `model.safetensors`, `drafter_config.json`,
`vocab.json`, `optimizer.pt`, `state.json`; `OUT/checkpoints/latest` names the newest. A
checkpoint is written to a temporary folder and renamed, so a kill never leaves half of one.
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


def save_checkpoint(
    root: Path,
    step: int,
    model,
    optimizer,
    scheduler,
    state: dict,
    gathered: tuple[dict, dict | None] | None = None,
) -> Path:
    """Rank 0 writes; `gathered` is `full_state(...)` when the model is sharded."""
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


def latest_checkpoint(root: Path) -> Path | None:
    pointer = root / "latest"
    if not pointer.exists():
        return None
    path = root / pointer.read_text().strip()
    return path if path.exists() else None


def load_checkpoint(path: Path, model, optimizer, scheduler, sharded: bool = False) -> dict:
    """Every rank reads the (unsharded) checkpoint; with FSDP2 each keeps its own shard."""
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
