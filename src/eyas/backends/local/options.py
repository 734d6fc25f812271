"""The in-process engine's options (none of its own yet: its batch is the pool's in-flight
limit, `--concurrency`)."""

from __future__ import annotations

from typing import Literal

from eyas.backends.engine import EngineOptions


class LocalOptions(EngineOptions):
    kind: Literal["local"] = "local"


__all__ = ["LocalOptions"]
