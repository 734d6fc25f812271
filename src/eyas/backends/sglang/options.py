"""SGLang's options: the `engine` table of a command whose `--backend` is sglang. eyas starts
no SGLang servers (SGLang has no CPU build to test a start against): the user runs them and
gives their URLs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from eyas.backends.engine import EngineOptions


class SGLangOptions(EngineOptions):
    kind: Literal["sglang"] = "sglang"
    batch_size: int = Field(
        1,
        ge=1,
        description="sglang: prompts per /generate call (a batch is answered when its longest "
        "member is done: docs/cluster-servers.md); 1 sends each prompt alone",
    )


__all__ = ["SGLangOptions"]
