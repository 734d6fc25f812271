"""Local Hugging Face model directories, read the safe way: safetensors only (weights are never
unpickled), remote code only when the user asked, and a clear error for a directory that is
not a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eyas.errors import EyasError


def require_model_dir(path: str | Path, what: str = "model") -> Path:
    """The directory, or a user error naming what is missing."""
    path = Path(path)
    if not path.exists():
        raise EyasError("no_model", f"{what} directory {path} does not exist")
    if not path.is_dir():
        raise EyasError("no_model", f"{what} {path} is a file, not a model directory")
    if not (path / "config.json").exists():
        raise EyasError("no_model", f"{path} has no config.json: not a {what} directory")
    return path


def model_config(model_dir: str | Path) -> dict[str, Any]:
    return json.loads((require_model_dir(model_dir) / "config.json").read_text())


def load_frozen_lm(
    model_dir: str | Path, device: str, dtype: Any, trust_remote_code: bool = False
) -> Any:
    """Eval-mode causal LM with frozen parameters."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one line per stage is eyas's job, not a loading bar
    require_model_dir(model_dir, "target model")
    if not list(Path(model_dir).glob("*.safetensors")):
        raise EyasError("no_model", f"{model_dir} holds no .safetensors weights")
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


def _weight_files(model_dir: Path) -> dict[str, Path]:
    """tensor name -> safetensors file; `model.safetensors.index.json` aware."""
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: model_dir / file for name, file in weight_map.items()}
    from safetensors import safe_open

    out: dict[str, Path] = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(file), "pt") as st:
            out.update({name: file for name in st.keys()})  # noqa: SIM118
    return out


def load_named_tensors(
    model_dir: str | Path, wanted: dict[str, tuple[str, ...]]
) -> tuple[dict[str, Any], list[str]]:
    """Only the named tensors of a checkpoint, never the whole model.

    `wanted` maps a role to candidate tensor names (checkpoints name the same tensor
    differently); returns {role: tensor} for the roles found and the names actually read.
    """
    from safetensors import safe_open

    files = _weight_files(require_model_dir(model_dir))
    out: dict[str, Any] = {}
    read: list[str] = []
    for role, names in wanted.items():
        name = next((n for n in names if n in files), None)
        if name is None:
            continue
        with safe_open(str(files[name]), "pt") as st:
            out[role] = st.get_tensor(name)
        read.append(name)
    return out, read


# Where a causal LM keeps the tensors a drafter needs (Llama/Qwen/DeepSeek/Kimi layouts).
EMBEDDING_NAMES = (
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
)
FINAL_NORM_NAMES = ("model.norm.weight", "norm.weight", "language_model.model.norm.weight")
LM_HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight")
