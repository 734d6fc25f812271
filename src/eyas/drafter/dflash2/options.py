"""The `eyas train` options only DFlash2 reads (DFlash's block, anchor, weighting and mask
options apply to it too). `TrainConfig` is built from every method's options model
(`eyas.drafter.options.METHOD_OPTIONS`) and `eyas train` has a flag per field. Defaults are
speculators 0.9.0's (`DFlash2SpeculatorConfig`, `get_trainer_kwargs`). Pydantic only:
`eyas.config` imports this without loading torch."""

from __future__ import annotations

from pydantic import BaseModel, Field


class DFlash2Options(BaseModel):
    conv_kernel_size: int = Field(
        2, ge=1, description="dflash2: causal taps of each block-local convolution"
    )
    conv_group_size: int = Field(
        16, ge=1, description="dflash2: hidden channels sharing one dynamic kernel"
    )
    selector_rank: int = Field(256, ge=1, description="dflash2: rank of the candidate selector")
    selector_top_k: int = Field(
        16, ge=1, description="dflash2: unary candidates the selector rescores per slot"
    )
    selector_loss_alpha: float = Field(
        1.0, ge=0, description="dflash2: weight of the selector's K-way loss"
    )
