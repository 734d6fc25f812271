"""Activation memory of drafter training, and when to trade it for compute.

Activation checkpointing (AC) keeps, per TTT step (per draft layer for DFlash), only what the
next step reads (the fed-back hidden state, the normalised state the loss reads, the step's
keys and values) and recomputes the layer's inside in backward: one more forward of the layer
per step. `auto` turns it on for micro-batches wider than `AC_AUTO_TOKENS` tokens, where the
kept activations start to dominate a rank's memory (bench/bench_train_memory.py measures the
saving and the step-time cost; docs/training-checkpoints.md quotes them).

`default_max_len` is the `--max-len` used when none is given: the longest sample whose
activations (`activation_bytes_per_token`, an estimate by element count) fit half the device,
capped by the target's context.
"""

from __future__ import annotations

from typing import Any

AC_AUTO_TOKENS = 4096
MIN_DEFAULT_MAX_LEN = 2048
DEVICE_SHARE = 0.5  # of the device's memory, for activations (the rest: weights, optimizer, slack)


def checkpointing_on(train_cfg: Any, width: int) -> bool:
    """Whether a micro-batch `width` tokens wide recomputes the drafter's layer in backward."""
    mode = getattr(train_cfg, "activation_checkpointing", "off")
    return mode == "on" or (mode == "auto" and width > AC_AUTO_TOKENS)


def activation_bytes_per_token(
    hidden: int,
    target_hidden: int,
    heads: int,
    head_dim: int,
    intermediate: int,
    ttt: int,
    checkpointing: bool,
    dtype_bytes: int = 2,
) -> int:
    """Bytes of activations per trained token at `ttt` steps, counted by element:

    - kept whatever the mode: the 3 fused target states and the final state (4 Ht), the fused
      hidden (H);
    - kept per step with AC: the fed-back and normalised states (2H), keys and values repeated
      to every head (2 h d), the loss's shifted teacher state (Ht);
    - kept per step without AC, in addition: the layer's inside (norms, the 2H attention input,
      q/k/v before and after rotary, the sink-padded copies, the MLP's 4 I): about
      10 H + 12 h d + 4 I; with AC one step's worth is live at a time, during its recompute.
    """
    kept = 4 * target_hidden + hidden
    step = 2 * hidden + 2 * heads * head_dim + target_hidden
    inside = 10 * hidden + 12 * heads * head_dim + 4 * intermediate
    per_step = step if checkpointing else step + inside
    recompute = inside if checkpointing else 0
    return dtype_bytes * (kept + ttt * per_step + recompute)


def device_memory_bytes(device: str) -> int:
    """Memory of the training device: the GPU's, or this machine's RAM per local rank."""
    import os

    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, ranks)


def default_max_len(target: Any, train_cfg: Any, device: str) -> int:
    """The largest power of two of tokens whose activations fit `DEVICE_SHARE` of the device
    with AC as `auto` would set it (on at that width), at least 2,048, at most the target's
    context."""
    from eyas.drafter.shape import drafter_shape

    shape = drafter_shape(
        target,
        num_attention_heads=train_cfg.num_attention_heads,
        head_dim=train_cfg.head_dim,
        intermediate_size=train_cfg.intermediate_size,
    )
    ac = getattr(train_cfg, "activation_checkpointing", "auto") != "off"
    cuda = device.startswith("cuda")
    per_token = activation_bytes_per_token(
        target.hidden_size,
        target.hidden_size,
        shape.num_attention_heads,
        shape.head_dim,
        shape.intermediate_size,
        train_cfg.ttt,
        ac,
        dtype_bytes=2 if cuda else 4,
    )
    fits = int(DEVICE_SHARE * device_memory_bytes(device)) // per_token
    length = MIN_DEFAULT_MAX_LEN
    while length * 2 <= fits:
        length *= 2
    return min(target.context_length, length)
