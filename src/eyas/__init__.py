"""eyas: EAGLE-3 drafter training data you can trust."""

__version__ = "0.1.0"
