"""vLLM: completions with token ids (`client`) and the engine's conventions."""

from eyas.backends.vllm.client import VLLMBackend

__all__ = ["VLLMBackend"]
