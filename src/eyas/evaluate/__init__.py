"""Evaluation: lossless speculative decoding and acceptance metrics."""
