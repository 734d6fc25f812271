"""P-EAGLE (parallel drafting EAGLE, arXiv 2602.01469): an EAGLE-3 drafter that drafts all K
positions in one forward, its COD-sampled training, parallel decoding and the vLLM layout."""

from eyas.lazy import lazy_exports

_EXPORTS = {
    "PEagleMethod": "eyas.drafter.peagle.method",
    "PEagleConfig": "eyas.drafter.peagle.model",
    "PEagleDrafter": "eyas.drafter.peagle.model",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
