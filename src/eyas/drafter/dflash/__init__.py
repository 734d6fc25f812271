"""DFlash (arXiv 2602.06036): the block drafter, its training, block decoding and layouts."""

from eyas.lazy import lazy_exports

_EXPORTS = {
    "DFlashMethod": "eyas.drafter.dflash.method",
    "DFlashConfig": "eyas.drafter.dflash.model",
    "DFlashDrafter": "eyas.drafter.dflash.model",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
