"""The drafter, owned by one `DraftMethod` per method (EAGLE-3/3.1, DFlash): config, layers,
training forward and loss, incremental decoding, export layouts and their loaders."""

import importlib
from typing import Any

# Imported on first use (PEP 562): the options modules of each method are read by
# `eyas.config` without loading torch and the models.
_EXPORTS = {
    "DraftMethod": "eyas.drafter.method",
    "Proposer": "eyas.drafter.method",
    "TreeNode": "eyas.drafter.method",
    "METHODS": "eyas.drafter.registry",
    "get_method": "eyas.drafter.registry",
    "method_of": "eyas.drafter.registry",
    "method_reading": "eyas.drafter.registry",
    "build_vocab_mapping": "eyas.drafter.vocab",
    "token_counts": "eyas.drafter.vocab",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
