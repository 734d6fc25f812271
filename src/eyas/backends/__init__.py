"""The one engine layer: a registry of engines (`registry`), one backend object per engine
(sglang, vllm, openai_chat (lossy, opt-in), local) and the one client policy every stage sends
its requests through (`policy.ServerPool`), with failures classified by `reasons`."""

from eyas.backends.base import Backend, BackendError, BackendSettings, Generation, GenRequest

__all__ = ["Backend", "BackendError", "BackendSettings", "GenRequest", "Generation"]
