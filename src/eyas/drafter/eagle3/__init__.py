"""EAGLE-3 and EAGLE-3.1: the model, its TTT training, incremental decoding and layouts."""

from eyas.drafter.eagle3.method import Eagle3Method
from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter

__all__ = ["Eagle3Config", "Eagle3Drafter", "Eagle3Method"]
