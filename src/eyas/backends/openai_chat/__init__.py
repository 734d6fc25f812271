"""OpenAI-compatible chat completions (`client`): text in, text out, opt-in and lossy; its
options (`options`).
`ENGINE` is its registry entry."""

from __future__ import annotations

from eyas.backends.engine import Engine
from eyas.backends.openai_chat.options import OpenAIChatOptions


def _backend() -> type:
    from eyas.backends.openai_chat.client import OpenAIChatBackend

    return OpenAIChatBackend


ENGINE = Engine(
    name="openai_chat", options=OpenAIChatOptions, default_concurrency=256, backend=_backend
)

__all__ = ["ENGINE", "OpenAIChatOptions"]
