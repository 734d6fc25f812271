"""EAGLE-3 and EAGLE-3.1: the model, its TTT training, incremental decoding and layouts."""

from eyas.lazy import lazy_exports

_EXPORTS = {
    "Eagle3Method": "eyas.drafter.eagle3.method",
    "Eagle3Config": "eyas.drafter.eagle3.model",
    "Eagle3Drafter": "eyas.drafter.eagle3.model",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
