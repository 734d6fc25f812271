"""EAGLE-3 and EAGLE-3.1: the model, its TTT training, incremental decoding and layouts."""

import importlib
from typing import Any

# Imported on first use (PEP 562): the options modules of each method are read by
# `eyas.config` without loading torch and the models.
_EXPORTS = {
    "Eagle3Method": "eyas.drafter.eagle3.method",
    "Eagle3Config": "eyas.drafter.eagle3.model",
    "Eagle3Drafter": "eyas.drafter.eagle3.model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
