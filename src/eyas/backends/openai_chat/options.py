"""OpenAI-compatible chat completions' options: the `engine` table of a command whose
`--backend` is openai_chat."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from eyas.backends.engine import EngineOptions


class OpenAIChatOptions(EngineOptions):
    kind: Literal["openai_chat"] = "openai_chat"
    served_model: str | None = Field(
        None, description="the model name requests ask for (default: the server's only one)"
    )


__all__ = ["OpenAIChatOptions"]
