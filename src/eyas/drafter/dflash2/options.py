"""DFlash2's own `eyas train` options, nested under `dflash2` (`--dflash2.selector-rank`, a
TOML `[dflash2]` table); DFlash's options (`dflash.*`: block, anchors, weighting, mask) apply
to it too. Defaults are speculators 0.9.0's (`DFlash2SpeculatorConfig`, `get_trainer_kwargs`).
Pydantic only: `eyas.config` imports this without loading torch."""

from __future__ import annotations

from pydantic import Field

from eyas.options import Strict


class DFlash2Options(Strict):
    conv_kernel_size: int = Field(
        2, ge=1, description="causal taps of each block-local convolution"
    )
    conv_group_size: int = Field(16, ge=1, description="hidden channels sharing one dynamic kernel")
    selector_rank: int = Field(256, ge=1, description="rank of the candidate selector")
    selector_top_k: int = Field(
        16, ge=1, description="unary candidates the selector rescores per slot"
    )
    selector_loss_alpha: float = Field(1.0, ge=0, description="weight of the selector's K-way loss")
