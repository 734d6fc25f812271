"""SGLang: native `/generate` with token ids (`client`) and the engine's conventions."""

from eyas.backends.sglang.client import SGLangBackend, parse_sglang_item, parse_sglang_response

__all__ = ["SGLangBackend", "parse_sglang_item", "parse_sglang_response"]
