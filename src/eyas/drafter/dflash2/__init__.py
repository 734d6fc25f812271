"""DFlash2: DFlash's block drafter with grouped dynamic convolutions and a candidate selector
(`docs/dflash2.md`): its training, selector decoding and layouts."""

from eyas.lazy import lazy_exports

_EXPORTS = {
    "DFlash2Method": "eyas.drafter.dflash2.method",
    "DFlash2Config": "eyas.drafter.dflash2.model",
    "DFlash2Drafter": "eyas.drafter.dflash2.model",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
