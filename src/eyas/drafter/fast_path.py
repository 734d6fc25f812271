"""Which training step runs: the fast path or the reference one
(`--fast-path auto|on|compiled|off`).

The reference path is SDPA attention with the diagonal merged through a sink column
(`eagle3.model.ttt_attention`) and a checkpointed, chunked loss that recomputes the teacher in
backward (`loss.soft_ce`): plain PyTorch, the CPU's path and the definition. The fast path
computes the same function with FlexAttention (`eagle3.model.ttt_attention_fast`,
`eyas.drafter.flex`), the teacher once per micro-batch and the loss's gradient in forward
(`eyas.drafter.fused_loss`), statistics left on the device; `tests/drafter/test_fast_path.py`
holds the two equal on CPU. `auto` runs it on CUDA, where its attention is compiled.
`compiled` is the fast path with its elementwise work compiled too, function by function
(`torch.compile` of the TTT merge, `ttt_attention.merge_diagonal`; the loss's per-chunk
arithmetic, `fused_loss.chunk_stats`; the RMSNorms, `layers.rms_norm`; SwiGLU's activation,
`layers.silu_mul`; the rotations, `rope.rotate_half` and `mla.rotate_pairs`): the same figures,
fewer kernels. The matmuls and the attention kernel stay as they are. Together these functions
are most of the fast path's elementwise memory traffic (`bench/bench_train_traffic.py`, counted
on CPU); speculators compiles its whole forward on CUDA. Not the default until a GPU run shows
it faster (`bench/bench_train_gpu.py`'s compiled cases).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from eyas.drafter.settings import MethodTrainSettings


def fast_path_on(train_cfg: MethodTrainSettings, device: torch.device | str) -> bool:
    mode = getattr(train_cfg, "fast_path", "auto")
    return mode in ("on", "compiled") or (mode == "auto" and torch.device(device).type == "cuda")


# what `--fast-path compiled` compiles, by name (`compiled` is called on these and no others)
COMPILED_FUNCTIONS = (
    "merge_diagonal",
    "chunk_stats",
    "rms_norm",
    "silu_mul",
    "rotate_half",
    "rotate_pairs",
)
_COMPILED: dict[Callable, Callable] = {}


def compiled(fn: Callable, on: bool = True) -> Callable:
    """`torch.compile(fn)`, built once per function, for `--fast-path compiled` (`fn` itself
    when not `on`: the caller's uncompiled fast path). Shapes turn
    dynamic after the second size (a row's shorter last chunk, another micro-batch length),
    and each number of TTT diagonal steps is its own graph: the recompile limit is raised to
    hold them all (a process-wide setting, never lowered)."""
    if not on:
        return fn
    if fn.__name__ not in COMPILED_FUNCTIONS:
        raise ValueError(f"{fn.__name__} is not in fast_path.COMPILED_FUNCTIONS")
    if fn not in _COMPILED:
        import torch._dynamo

        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 32)
        _COMPILED[fn] = torch.compile(fn, dynamic=None)
    return _COMPILED[fn]


def compiled_functions() -> set[Callable]:
    """The functions `compiled` has built since the last `forget_compiled`."""
    return set(_COMPILED)


def forget_compiled() -> None:
    """Drop the compiled functions (after `torch._dynamo.reset()`, which discards their code)."""
    _COMPILED.clear()


def loss_compiled(train_cfg: MethodTrainSettings) -> bool:
    """The fast path's elementwise functions (`COMPILED_FUNCTIONS`) run compiled
    (`--fast-path compiled`); the name is older than all but two of them."""
    return getattr(train_cfg, "fast_path", "auto") == "compiled"


def sharded(tensor: torch.Tensor) -> bool:
    """A DTensor shard (FSDP2): its whole value exists only inside its module's forward."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)
