"""Backends behind one interface: sglang, vllm, openai_chat (lossy, opt-in), local."""

from eyas.backends.base import Backend, BackendError, Generation, GenRequest

__all__ = ["Backend", "BackendError", "GenRequest", "Generation"]
