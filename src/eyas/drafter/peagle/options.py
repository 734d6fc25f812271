"""The `eyas train` options only P-EAGLE reads. `TrainConfig` is built from every method's
options model (`eyas.drafter.options.METHOD_OPTIONS`) and `eyas train` has a flag per field, so an
option added here reaches the config, the command line and the docs without another edit.
Pydantic only: `eyas.config` imports this without loading torch. Defaults are speculators
0.9.0's (`train/config/schema.py` `PEagleArgs`, `DataArgs.max_anchors`)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PEagleOptions(BaseModel):
    peagle_depths: int = Field(
        8,
        ge=2,
        description="peagle: draft positions trained, drafted in one forward (speculators "
        "num_depths); vLLM serves up to this many",
    )
    peagle_down_sample_ratio: float = Field(
        0.7,
        gt=0,
        le=1,
        description="peagle: COD sampling keeps ratio^d of the positions at depth d",
    )
    peagle_down_sample_ratio_min: float = Field(
        0.2, ge=0, le=1, description="peagle: the least COD ratio at any depth"
    )
    peagle_max_anchors: int | None = Field(
        512,
        ge=1,
        description="peagle: supervised positions per sequence that seed depths >= 1 (none: all)",
    )
    peagle_mask_token_id: int | None = Field(
        None,
        ge=0,
        description="peagle: the token of the parallel positions (default as dflash's: the "
        "target's pad token, else the highest id no training sequence uses; never one whose "
        "embedding row is zero)",
    )
