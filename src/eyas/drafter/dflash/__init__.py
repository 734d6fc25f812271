"""DFlash (arXiv 2602.06036): the block drafter, its training, block decoding and layouts."""

import importlib
from typing import Any

# Imported on first use (PEP 562): the options modules of each method are read by
# `eyas.config` without loading torch and the models.
_EXPORTS = {
    "DFlashMethod": "eyas.drafter.dflash.method",
    "DFlashConfig": "eyas.drafter.dflash.model",
    "DFlashDrafter": "eyas.drafter.dflash.model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
