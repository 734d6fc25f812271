"""P-EAGLE's own `eyas train` options, nested under `peagle` (`--peagle.depths`, a TOML
`[peagle]` table); its layer is EAGLE-3's, so `eagle3.*` applies too. Defaults are speculators
0.9.0's (`train/config/schema.py` `PEagleArgs`, `DataArgs.max_anchors`). Pydantic only:
`eyas.config` imports this without loading torch."""

from __future__ import annotations

from pydantic import Field

from eyas.options import Strict


class PEagleOptions(Strict):
    depths: int = Field(
        8,
        ge=2,
        description="draft positions trained, drafted in one forward (speculators num_depths); "
        "vLLM serves up to this many",
    )
    down_sample_ratio: float = Field(
        0.7, gt=0, le=1, description="COD sampling keeps ratio^d of the positions at depth d"
    )
    down_sample_ratio_min: float = Field(
        0.2, ge=0, le=1, description="the least COD ratio at any depth"
    )
    max_anchors: int | None = Field(
        512,
        ge=1,
        description="supervised positions per sequence that seed depths >= 1 (none: all)",
    )
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="the token of the parallel positions (default as DFlash's: the target's pad "
        "token, else the highest id no training sequence uses; never one whose embedding row "
        "is zero)",
    )
