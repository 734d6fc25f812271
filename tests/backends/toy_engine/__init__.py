"""A toy serving engine, written the way a new engine joins eyas: this one package (its
options, its server and the class that starts it, its backend, how it counts speculative
decoding) plus one entry in `eyas.backends.registry.ENGINES`, and no other file:

    registry.ENGINES["toy"] = toy_engine.ENGINE

`tests/backends/test_toy_serving_engine.py` adds that line and runs `eyas generate` and served
`eyas eval` through it. Nothing in eyas names it; it uses only eyas's engine interfaces
(`eyas.backends.engine`, `.server`, `.base`, `.policy`).
"""

from __future__ import annotations

from eyas.backends.engine import Engine
from toy_engine.options import ToyOptions


def _backend() -> type:
    from toy_engine.client import ToyBackend

    return ToyBackend


def _acceptance() -> object:
    from toy_engine.acceptance import ToyAcceptance

    return ToyAcceptance()


def _server() -> type:
    from toy_engine.server import ToyServer

    return ToyServer


ENGINE = Engine(
    name="toy",
    options=ToyOptions,
    default_concurrency=8,
    backend=_backend,
    acceptance=_acceptance,
    server=_server,
)
