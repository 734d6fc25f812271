"""Model formats, one per family, looked up by exact name (`--profile`) or detected from the
tokenizer. Adding a family is one module and one registry line below."""

from __future__ import annotations

from typing import Any

from eyas.formats.base import ModelFormat, ParsedCall, ParsedOutput, Turn
from eyas.formats.glm import Glm45
from eyas.formats.kimi import KimiK2, KimiK25
from eyas.formats.qwen3 import Qwen3

# Detection tries these in order; the generic format matches every tokenizer, so it is last.
MODEL_FORMATS: dict[str, ModelFormat] = {
    f.name: f for f in (KimiK25(), KimiK2(), Qwen3(), Glm45(), ModelFormat())
}


class ModelFormatError(ValueError):
    pass


def get_model_format(name: str) -> ModelFormat:
    try:
        return MODEL_FORMATS[name]
    except KeyError:
        raise ModelFormatError(
            f"unknown profile {name!r}; choose one of {sorted(MODEL_FORMATS)}"
        ) from None


def detect_model_format(tokenizer: Any) -> ModelFormat:
    return next(f for f in MODEL_FORMATS.values() if f.matches(tokenizer))


__all__ = [
    "MODEL_FORMATS",
    "ModelFormat",
    "ModelFormatError",
    "ParsedCall",
    "ParsedOutput",
    "Turn",
    "detect_model_format",
    "get_model_format",
]
