"""The drafter's frozen tensors in the compute dtype.

The frozen parameters are the target's: its input embedding (every method), a frozen EAGLE-3
draft head (`--eagle3.draft-head frozen`: the target's rows) and DFlash's head. Under bf16 the
trainer holds them in bf16 on any number of GPUs, as FSDP2 ranks always did. On a target stored
in bf16 they are its exact values, and the step reads them in bf16 anyway: autocast casts the
heads for their products, and the embedding's rows enter bf16 products after the input norm
(EAGLE-3, whose norm, like HF Llama's, rounds its normalised input to the input's dtype) or as
the start of a residual stream (DFlash; EAGLE-3's starts from `fc`'s output, bf16 under
autocast). So the step is the FSDP2 ranks' arithmetic, at half the memory: at Kimi-K2.5 width
the embedding alone is 4.7 GB in fp32, 2.3 GB in bf16.

What leaves the trainer is unchanged: the final drafter takes the embedding (and a frozen head
equal to the target's) from the target as it is stored (`Trainer.finish`), and checkpoints hold
no frozen tensor (`checkpoint.frozen_names`).
"""

from __future__ import annotations

import torch
from torch import nn


def hold_frozen(model: nn.Module, dtype: torch.dtype) -> int:
    """Casts `model`'s frozen parameters to `dtype` in place (before any FSDP2 wrapping, which
    leaves them out of its units); returns the bytes this frees."""
    freed = 0
    with torch.no_grad():
        for p in model.parameters():
            if not p.requires_grad and p.dtype != dtype:
                before = p.numel() * p.element_size()
                p.data = p.data.to(dtype)
                freed += before - p.numel() * p.element_size()
    return freed
