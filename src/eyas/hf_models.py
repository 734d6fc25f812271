"""Loading a local Hugging Face causal LM the safe way, for every stage that runs one (the
local backend, the training target, evaluation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_frozen_lm(
    model_dir: str | Path, device: str, dtype: Any, trust_remote_code: bool = False
) -> Any:
    """Eval-mode model with frozen parameters: safetensors only (weights are never
    unpickled), remote code only when the user asked for it."""
    from transformers import AutoModelForCausalLM

    model = (
        AutoModelForCausalLM.from_pretrained(
            str(model_dir),
            dtype=dtype,
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
        )
        .to(device)
        .eval()
    )
    for p in model.parameters():
        p.requires_grad_(False)
    return model
