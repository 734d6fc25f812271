"""vLLM: completions with token ids (`client`), hidden-state capture (`capture`), the
speculative-decoding counters (`acceptance`), the servers eyas starts (`server`), its options
(`options`) and the engine's conventions (`conventions`). `ENGINE` is its registry entry."""

from __future__ import annotations

from eyas.backends.engine import Engine
from eyas.backends.vllm.options import VLLMOptions


def _backend() -> type:
    from eyas.backends.vllm.client import VLLMBackend

    return VLLMBackend


def _acceptance() -> object:
    from eyas.backends.vllm.acceptance import VLLMAcceptance

    return VLLMAcceptance()


def _server() -> type:
    from eyas.backends.vllm.server import VLLMServer

    return VLLMServer


# vLLM schedules up to 256 sequences by default (measured on CPU: 512 in flight 1.7x faster
# than 64); the adaptive limit finds what a given server sustains below this ceiling
ENGINE = Engine(
    name="vllm",
    options=VLLMOptions,
    default_concurrency=256,
    backend=_backend,
    acceptance=_acceptance,
    server=_server,
)

__all__ = ["ENGINE", "VLLMOptions"]
