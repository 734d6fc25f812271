"""EAGLE-3's own `eyas train` options, nested under `eagle3` (`--eagle3.draft-head`, a TOML
`[eagle3]` table): EAGLE-3, EAGLE-3.1 and P-EAGLE (built on EAGLE-3's layer) read them. The
registry of every method's options is `eyas.drafter.options.MethodOptions`. Pydantic only:
`eyas.config` imports this without loading torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from eyas.options import Strict


class Eagle3Options(Strict):
    draft_head: Literal["trained", "frozen"] = Field(
        "trained",
        description="the draft head (lm_head over the draft vocabulary), initialised from the "
        "target's head rows either way: trained with the drafter, or frozen (speculators' "
        "choice; fewer trainable parameters and FLOPs)",
    )
    norm_before_residual: bool = Field(
        False,
        description="the residual stream starts from hidden_norm(fused) instead of the fused "
        "state (speculators' default); vLLM serves it, SGLang's llama_eagle3.py cannot "
        "(`--format sglang` refuses it)",
    )
