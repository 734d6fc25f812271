"""The toy engine's options: the launch options every engine eyas starts has (its python,
passthrough arguments, parallelism, ...), and one of its own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

from eyas.backends.engine import LaunchOptions


class ToyOptions(LaunchOptions):
    kind: Literal["toy"] = "toy"
    # the toy needs nothing installed: this python serves it
    python: Path | None = Field(default_factory=lambda: Path(sys.executable))
    busy_first: bool = Field(
        False, description="answer each request's first attempt with HTTP 503 (a busy server)"
    )
