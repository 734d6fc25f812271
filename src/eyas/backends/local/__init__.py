"""In-process transformers (`client`: batched generation, hidden-state capture;
`hf_generate`: the batched decoding). `ENGINE` is its registry entry; `eyas eval --backend
local` is eyas's own offline evaluation, in process."""

from __future__ import annotations

from eyas.backends.engine import Engine
from eyas.backends.local.options import LocalOptions


def _backend() -> type:
    from eyas.backends.local.client import LocalBackend

    return LocalBackend


# prompts per in-process batch: the in-flight limit of its pool
ENGINE = Engine(
    name="local",
    options=LocalOptions,
    default_concurrency=16,
    backend=_backend,
    offline_eval=True,
)

__all__ = ["ENGINE", "LocalOptions"]
