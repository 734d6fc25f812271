"""DFlash's own `eyas train` options, nested under `dflash` (`--dflash.block-size`, a TOML
`[dflash]` table): DFlash and DFlash2 (built on DFlash's blocks) read them. The registry of
every method's options is `eyas.drafter.options.MethodOptions`. Pydantic only: `eyas.config`
imports this without loading torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from eyas.options import Strict


class DFlashOptions(Strict):
    block_size: int = Field(
        8, ge=2, description="tokens per block (the anchor, then block_size - 1 drafts)"
    )
    max_anchors: int = Field(512, ge=1, description="blocks drawn per sequence")
    weighting: Literal["decay", "dpace"] = Field(
        "decay", description="slot weights exp(-(i-1)/gamma), or D-PACE"
    )
    gamma: float = Field(4.0, gt=0, description="decay of the slot weights")
    dpace_alpha: float = Field(0.5, ge=0, le=1, description="D-PACE smoothing")
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="the mask token (default: the target's pad token, else the highest id no "
        "training sequence uses; never one whose embedding row is zero)",
    )
