"""The `eyas train` options only EAGLE-3 and EAGLE-3.1 read. `TrainConfig` is built from every
method's options model (`eyas.drafter.options.METHOD_OPTIONS`) and `eyas train` has a flag per field, so
an option added here reaches the config, the command line and the docs without another edit.
Pydantic only: `eyas.config` imports this without loading torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Eagle3Options(BaseModel):
    attention: Literal["mha", "mla"] | None = Field(
        None,
        description="eagle3/eagle3.1 drafter attention: mha (Llama layer) or mla (DeepSeek-V3 "
        "latent attention, dims from the target; default for MLA targets such as Kimi-K2.5)",
    )
    draft_head: Literal["trained", "frozen"] = Field(
        "trained",
        description="eagle3/eagle3.1: the draft head (lm_head over the draft vocabulary), "
        "initialised from the target's head rows either way: trained with the drafter, or "
        "frozen (speculators' choice; fewer trainable parameters and FLOPs)",
    )
