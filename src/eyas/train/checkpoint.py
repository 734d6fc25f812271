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

from eyas.drafter.model import DrafterConfig, Eagle3Drafter


def save_drafter(model: Eagle3Drafter, out: Path, extra: dict[str, Any]) -> None:
    """Weights (including the frozen embedding and d2t/t2d) and the config."""
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    (out / "drafter_config.json").write_text(
        json.dumps({**model.config.to_dict(), **extra}, indent=2) + "\n"
    )


def load_drafter(path: str | Path, device: str = "cpu") -> Eagle3Drafter:
    path = Path(path)
    raw = json.loads((path / "drafter_config.json").read_text())
    fields = DrafterConfig.__dataclass_fields__
    cfg = DrafterConfig(**{k: v for k, v in raw.items() if k in fields})
    model = Eagle3Drafter(cfg)
    model.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
    return model.to(device)


def save_checkpoint(root: Path, step: int, model, optimizer, scheduler, state: dict) -> Path:
    final = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    save_drafter(model, tmp, {})
    torch.save(
        {
            "optimizer": optimizer.state_dict(),
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


def load_checkpoint(path: Path, model, optimizer, scheduler) -> dict:
    model.load_state_dict(load_file(str(path / "model.safetensors")), strict=True)
    blob = torch.load(path / "optimizer.pt", weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    return json.loads((path / "state.json").read_text())
