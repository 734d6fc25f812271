"""The drafter, owned by one `DraftMethod` per method (EAGLE-3/3.1, DFlash): config, layers,
training forward and loss, incremental decoding, export layouts and their loaders."""

from eyas.drafter.method import DraftMethod, Proposer, TreeNode
from eyas.drafter.registry import METHODS, get_method, method_of, method_reading
from eyas.drafter.vocab import build_vocab_mapping, token_counts

__all__ = [
    "METHODS",
    "DraftMethod",
    "Proposer",
    "TreeNode",
    "build_vocab_mapping",
    "get_method",
    "method_of",
    "method_reading",
    "token_counts",
]
