"""The drafter, owned by one `DraftMethod` per method (EAGLE-3/3.1, DFlash): config, layers,
training forward and loss, incremental decoding, export layouts and their loaders."""

from eyas.lazy import lazy_exports

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
__getattr__ = lazy_exports(__name__, _EXPORTS)
