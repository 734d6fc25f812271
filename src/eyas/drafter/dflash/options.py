"""The `eyas train` options only DFlash reads. `TrainConfig` is built from every method's
options model (`eyas.drafter.options.METHOD_OPTIONS`) and `eyas train` has a flag per field, so an
option added here reaches the config, the command line and the docs without another edit.
Pydantic only: `eyas.config` imports this without loading torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class DFlashOptions(BaseModel):
    block_size: int = Field(
        8, ge=2, description="dflash: tokens per block (the anchor, then block_size - 1 drafts)"
    )
    max_anchors: int = Field(512, ge=1, description="dflash: blocks drawn per sequence")
    dflash_weighting: Literal["decay", "dpace"] = Field(
        "decay", description="dflash: slot weights exp(-(i-1)/gamma), or D-PACE"
    )
    dflash_gamma: float = Field(4.0, gt=0, description="dflash: decay of the slot weights")
    dpace_alpha: float = Field(0.5, ge=0, le=1, description="dflash: D-PACE smoothing")
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="dflash: the mask token (default: the target's pad token, else the "
        "highest id no training sequence uses; never one whose embedding row is zero)",
    )
