"""vLLM's options: the `engine` table of a command whose `--backend` is vllm. Pydantic only
(the registry imports it when a config is read, without the client)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from eyas.backends.engine import LaunchOptions


class VLLMOptions(LaunchOptions):
    kind: Literal["vllm"] = "vllm"
    endpoint: Literal["completions", "generate"] = Field(
        "completions",
        description="generation endpoint: /v1/completions with token ids, or "
        "/inference/v1/generate (a server started with --enable-scale-out)",
    )
    served_model: str | None = Field(
        None, description="the model name requests ask for (default: the server's only one)"
    )


__all__ = ["VLLMOptions"]
