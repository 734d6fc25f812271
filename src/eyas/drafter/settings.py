"""`MethodTrainSettings`: the training settings every `DraftMethod` hook may read from the
`train_cfg` it is given. `eyas.drafter` sits below `eyas.train`, so the methods cannot name
`TrainConfig`; they name this protocol instead, which `TrainConfig` satisfies (a test checks
it, and that every `train_cfg` read in `eyas.drafter` is declared here or in the method's own
protocol). A method's own options (its package's `options` module) are read through its
narrower protocol (`Eagle3TrainSettings`, `DFlashTrainSettings`, ...), which extends this one.
Light: imports nothing of eyas."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable


@runtime_checkable
class MethodTrainSettings(Protocol):
    method: str
    ttt: int  # EAGLE-3's test-time-training steps (the memory estimate's step count)
    loss_decay: float
    chunk_len: int
    draft_layers: int | None
    num_attention_heads: int | None
    head_dim: int | None
    intermediate_size: int | None
    attention: Literal["mha", "mla"] | None
    activation_checkpointing: Literal["auto", "on", "off"]
    activation_checkpointing_above: int | None  # auto's threshold in tokens (`memory.ac_threshold`)
    fast_path: Literal["auto", "on", "compiled", "off"]
