"""The EAGLE-3 draft model and its vocabulary mapping."""

from eyas.drafter.model import DrafterConfig, Eagle3Drafter
from eyas.drafter.vocab import build_vocab_mapping, token_counts

__all__ = ["DrafterConfig", "Eagle3Drafter", "build_vocab_mapping", "token_counts"]
