"""SGLang: native `/generate` with token ids (`client`), the speculative-decoding counts of its
answers (`acceptance`), its options (`options`) and the engine's conventions (`conventions`).
`ENGINE` is its registry entry."""

from __future__ import annotations

from eyas.backends.engine import Engine
from eyas.backends.sglang.options import SGLangOptions


def _backend() -> type:
    from eyas.backends.sglang.client import SGLangBackend

    return SGLangBackend


def _acceptance() -> object:
    from eyas.backends.sglang.acceptance import SGLangAcceptance

    return SGLangAcceptance()


# one prompt per call by default (a batch is answered at its longest member); like vLLM, the
# adaptive limit finds what a given server sustains below this ceiling
ENGINE = Engine(
    name="sglang",
    options=SGLangOptions,
    default_concurrency=256,
    backend=_backend,
    acceptance=_acceptance,
)

__all__ = ["ENGINE", "SGLangOptions"]
