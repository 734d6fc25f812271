"""What a training run will need per GPU, printed by `eyas train` before it starts.

An estimate from the drafter's shape and the run's settings (docs/training-scale.md), held
against the peaks measured on one H200 on 2026-12-04 (`bench/results/train_h200_reference.json`:
within 10% for every row, `tests/train/test_budget.py`). Per GPU, for one micro-batch of T
tokens on this rank:

- between steps: 12 B per trainable parameter (fp32 weight, AdamW's two fp32 moments), divided
  by the world size under FSDP2; the drafter's frozen tensors (its copy of the target's
  embedding; a frozen draft head), in bf16 under bf16 (`eyas.train.precision`); what the
  target holds on the device (a captured target: its head and final norm; an online one: the
  whole model); the input states, (aux layers + 1) x hidden x 2 B per token;
- in the step: the gradients, 4 B per trainable parameter (divided likewise), autocast's bf16
  copies of the weights, 2 B each under bf16 (these two were missing before and are why the
  old estimate ran 15-28% low), and the activations: `eyas.drafter.memory.
  activation_elements_per_token` times the element size and T, times `ACTIVATION_FACTOR` for
  the path, attention and activation checkpointing: what the count leaves out (fp32 normalised
  states and merges, the loss's chunks, the teacher's full-vocabulary workspace, the backward's
  transients), calibrated on the measured peaks (reference path) and on peaks traced op by op
  on fake tensors at the same width (fast path; `eyas.testing.step_cost.trace_memory`, which
  reproduces the measured reference peaks within 4%).

FLOPs: `eyas.train.step_flops` (FlopCounterMode's count of the step, dense attention).
Throughput: the device's dense bf16 peak x a measured MFU (`MEASURED_MFU`, per device,
attention and path) / the FLOPs of work per token (the count with the causal attention kernel
at half, the work it does: MFU is then flat across lengths, 0.354-0.371 for MHA and 0.299-0.331
for MLA over the 2026-12-04 rows), times the GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from eyas.drafter.memory import (
    AC_AUTO_TOKENS,
    AC_OFF_SHARE,
    ActivationShape,
    activation_elements_per_token,
)
from eyas.train.step_flops import step_flops

# Dense bf16 peak (FLOP/s) by device name fragment; None: no throughput estimate.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "B200": 2250e12}

# (device, attention, path) -> MFU on the FLOPs of work (module docstring). Each constant is the
# median over the rows it names, eyas at commit ea9aa86 on one H200 (torch 2.11, bf16),
# 2026-12-04, bench/results/train_h200_reference.json:
#   H200 mha reference: 4k/16k/32k AC on, 4k/16k AC off: 0.363 0.371 0.360 0.354 0.361
#   H200 mla reference: 4k/16k/32k AC on, 4k/16k AC off: 0.299 0.324 0.331 0.300 0.319
# The fast path, bench/bench_train_gpu.py on one H200 (torch 2.11, bf16), 2026-12-04,
# bench/results/train_gpu.json, MFU = the budget's MFU x measured / estimated tokens/s:
#   H200 mha fast: llama-shaped 4k AC off, 16k AC on; Kimi MHA 16k AC on: 0.420 0.451 0.452
#   H200 mla fast: Kimi MLA 16k AC on: 0.309 (one row)
# A device or attention without a fast-path row borrows its reference MFU (stated in the line).
MEASURED_MFU = {
    ("H200", "mha", "reference"): 0.361,
    ("H200", "mla", "reference"): 0.319,
    ("H200", "mha", "fast"): 0.451,
    ("H200", "mla", "fast"): 0.309,
}

# (path, attention, AC) -> the activation count's factor (module docstring). Reference: least
# squares over the 2026-12-04 H200 peaks of that attention and AC (bench/results/
# train_h200_reference.json); fast: over the traced peaks at 4k and 16k tokens
# (bench/results/train_flops.json, `traced`).
ACTIVATION_FACTOR = {
    ("reference", "mha", True): 1.31,
    ("reference", "mha", False): 1.345,
    ("reference", "mla", True): 1.175,
    ("reference", "mla", False): 1.19,
    ("fast", "mha", True): 0.963,
    ("fast", "mha", False): 0.919,
    ("fast", "mla", True): 0.785,
    ("fast", "mla", False): 0.682,
}


@dataclass
class Budget:
    world: int
    fsdp: bool
    trainable_params: int
    frozen_params: int
    tokens_per_rank: int  # one micro-batch on one rank
    trainable_gb: float  # weights and AdamW moments
    frozen_gb: float  # the drafter's frozen tensors and what the target holds on the device
    step_gb: float  # gradients and autocast's bf16 weight copies
    activations_gb: float
    states_gb: float
    total_gb: float
    bytes_per_token: int  # activations and input states: what grows with the tokens
    gflop_per_token: float  # FlopCounterMode's count (dense attention)
    flops_per_step: int
    tokens_per_s: float | None  # for the whole run (all ranks); None without a known peak
    mfu: float | None
    mfu_source: str | None
    activation_checkpointing: bool = False
    attention: str = "mha"
    path: str = "reference"

    def line(self) -> str:
        ac = " (checkpointed)" if self.activation_checkpointing else ""
        speed = (
            f", ~{self.tokens_per_s / 1e3:,.1f}k tokens/s over {self.world} GPU(s) at "
            f"{self.mfu:.0%} MFU ({self.mfu_source})"
            if self.tokens_per_s
            else ""
        )
        return (
            f"memory estimate per GPU: {self.total_gb:.1f} GB (weights and optimizer "
            f"{self.trainable_gb:.1f}, frozen target tensors {self.frozen_gb:.1f}, gradients and "
            f"bf16 copies {self.step_gb:.1f}, activations {self.activations_gb:.1f} for "
            f"{self.tokens_per_rank:,} tokens{ac}, input states {self.states_gb:.2f}); "
            f"{self.gflop_per_token:.0f} GFLOP per token{speed}"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def measured_mfu(device_name: str | None, attention: str, path: str) -> tuple[float, str] | None:
    """(MFU, where it comes from) for this device and attention; the fast path borrows the
    reference path's until it is measured."""
    if not device_name:
        return None
    for (dev, att, p), mfu in MEASURED_MFU.items():
        if dev in device_name and att == attention:
            if p == path:
                return mfu, f"measured on {dev}, {path} path"
            if path == "fast" and (dev, att, "fast") not in MEASURED_MFU:
                return mfu, f"the reference path's on {dev}; the fast path's not measured yet"
    return None


def estimate(
    *,
    shape: ActivationShape,
    n_aux: int,
    ttt: int,
    trainable_params: int,
    frozen_params: int,
    frozen_bytes: int,
    vocab: int,
    draft_vocab: int,
    head_trained: bool,
    tokens_per_rank: int,
    world: int,
    fsdp: bool,
    device_name: str | None,
    checkpointing: bool = False,
    dtype_bytes: int = 2,
    fast: bool = False,
    flops: dict[str, int] | None = None,
) -> Budget:
    """The estimate (module docstring). `frozen_bytes`: the frozen tensors held on the device
    (the drafter's, and what the target holds there); `flops`: the step's FLOPs by term
    (default: `step_flops` of an EAGLE-3 drafter of `shape`)."""
    t, gb = tokens_per_rank, 1e9
    shard = world if fsdp else 1
    path = "fast" if fast else "reference"
    attention = "mla" if shape.mla else "mha"
    trainable_gb = 12 * trainable_params / shard / gb
    step_gb = (4 + (2 if dtype_bytes == 2 else 0)) * trainable_params / shard / gb
    factor = ACTIVATION_FACTOR[(path, attention, checkpointing)]
    per_token = dtype_bytes * activation_elements_per_token(shape, ttt, checkpointing)
    act_gb = factor * per_token * t / gb
    states_gb = (n_aux + 1) * shape.target_hidden * 2 * t / gb
    if flops is None:
        flops = step_flops(
            shape, tokens=t, ttt=ttt, n_aux=n_aux, vocab=vocab, draft_vocab=draft_vocab,
            head_trained=head_trained, checkpointing=checkpointing, fast=fast,
        )  # fmt: skip
    total = sum(flops.values())
    work = total - flops.get("attention", 0) / 2  # the causal kernel does half its dense count
    mfu = measured_mfu(device_name, attention, path)
    peak = next((v for k, v in PEAK_BF16.items() if device_name and k in device_name), None)
    rate = peak * mfu[0] / (work / t) * world if peak and mfu else None
    return Budget(
        world=world,
        fsdp=fsdp,
        trainable_params=trainable_params,
        frozen_params=frozen_params,
        tokens_per_rank=t,
        trainable_gb=round(trainable_gb, 2),
        frozen_gb=round(frozen_bytes / gb, 2),
        step_gb=round(step_gb, 2),
        activations_gb=round(act_gb, 2),
        states_gb=round(states_gb, 3),
        bytes_per_token=round((act_gb + states_gb) * gb / t),
        total_gb=round(trainable_gb + frozen_bytes / gb + step_gb + act_gb + states_gb, 2),
        gflop_per_token=round(total / t / 1e9, 1),
        flops_per_step=total,
        tokens_per_s=round(rate) if rate else None,
        mfu=mfu[0] if rate else None,
        mfu_source=mfu[1] if rate else None,
        activation_checkpointing=checkpointing,
        attention=attention,
        path=path,
    )


def auto_checkpointing_above(off: Budget, capacity_bytes: int, share: float = AC_OFF_SHARE) -> int:
    """`--activation-checkpointing auto`'s threshold on a device of `capacity_bytes`
    (`eyas.drafter.memory`): the most tokens per micro-batch, in steps of 1,024, whose estimate
    without activation checkpointing fits `share` of the device, given `off`, this run's
    estimate without it (at any number of tokens: past the weights, optimizer and frozen
    tensors it grows by `bytes_per_token`); at least `AC_AUTO_TOKENS`, the rule where the
    device is not read."""
    fixed = (off.trainable_gb + off.frozen_gb + off.step_gb) * 1e9
    fits = (share * capacity_bytes - fixed) / max(off.bytes_per_token, 1)
    return max(AC_AUTO_TOKENS, int(fits) // 1024 * 1024)


def resolved_checkpointing_above(train_cfg, off: Callable[[], Budget], device: str) -> int | None:
    """What `auto` without a threshold resolves to on `device`: on a GPU
    `auto_checkpointing_above` of its memory and `off()` (the run's estimate without AC); None
    where nothing is resolved (AC not auto, a threshold given, no GPU: `AC_AUTO_TOKENS`)."""
    if (
        getattr(train_cfg, "activation_checkpointing", "off") != "auto"
        or getattr(train_cfg, "activation_checkpointing_above", None)
        or not device.startswith("cuda")
    ):
        return None
    from eyas.drafter.memory import device_memory_bytes

    return auto_checkpointing_above(off(), device_memory_bytes(device))


def device_name(device: str) -> str | None:
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(device)


def device_peak(device: str) -> float | None:
    name = device_name(device)
    return next((v for k, v in PEAK_BF16.items() if name and k in name), None)


# The Kimi-K2.5 drafter's widths: hidden 7168, 64 heads, MLP 12288; MHA heads of 128 (issue
# 28's drafter, the published lightseekorg/kimi-k2.5-eagle3), MLA with the target's ranks.
KIMI_HIDDEN, KIMI_HEADS, KIMI_MLP, KIMI_VOCAB = 7168, 64, 12288, 163_840
KIMI_MHA = ActivationShape.mha(KIMI_HIDDEN, KIMI_HIDDEN, KIMI_HEADS, 128, KIMI_MLP)
KIMI_MLA = ActivationShape(KIMI_HIDDEN, KIMI_HIDDEN, KIMI_HEADS, 192, 128, KIMI_MLP, 1536, 512, 64)
KIMI_DRAFT_VOCAB = 32000


def attention_params(shape: ActivationShape) -> int:
    """Weights of the EAGLE-3 layer's attention over its 2H input (MHA: q/k/v/o; MLA: the
    projections and norms of `eyas.drafter.mla.MLAAttention`)."""
    from eyas.train.step_flops import attention_linear_params

    norms = (shape.q_lora_rank or 0) + shape.kv_lora_rank if shape.mla else 0
    return attention_linear_params(shape) + norms


def kimi_table(
    gpus: tuple[int, ...] = (1, 8, 16),
    tokens_per_rank: int = 16_384,
    checkpointing: bool = False,
    attention: str = "mha",
    fast: bool = True,
    head_trained: bool = True,
    frozen_bytes_per_param: int = 2,
    target_embedding: bool = False,
) -> list[dict]:
    """The Kimi-K2.5 drafter (hidden 7168, MLP 12288, a 32k draft vocabulary; MHA 64 x 128 or
    MLA with the target's ranks) at TTT 7 on H200s, FSDP2, bf16 activations, holding what
    `eyas train` holds: the drafter's frozen 163,840 x 7168 embedding (and a frozen head) in
    bf16 and the captured target's head in bf16. `frozen_bytes_per_param` 4 and
    `target_embedding` describe the runs before 2026-12-07, which held the drafter's frozen
    tensors in fp32 on one GPU and the target's embedding on the device too."""
    shape = KIMI_MLA if attention == "mla" else KIMI_MHA
    h = KIMI_HIDDEN
    norms = 4 * h  # the layer's input, hidden and post-attention norms, and the final one
    head = KIMI_DRAFT_VOCAB * h
    trainable = 3 * h * h + attention_params(shape) + 3 * h * KIMI_MLP + norms
    trainable += head if head_trained else 0
    frozen = KIMI_VOCAB * h + (0 if head_trained else head)
    target = (2 if target_embedding else 1) * KIMI_VOCAB * h  # its head (and embedding), bf16
    frozen_bytes = frozen_bytes_per_param * frozen + 2 * target
    return [
        estimate(
            shape=shape,
            n_aux=3,
            ttt=7,
            trainable_params=trainable,
            frozen_params=frozen + target,
            frozen_bytes=frozen_bytes,
            vocab=KIMI_VOCAB,
            draft_vocab=KIMI_DRAFT_VOCAB,
            head_trained=head_trained,
            tokens_per_rank=tokens_per_rank,
            world=n,
            fsdp=True,
            device_name="NVIDIA H200",
            checkpointing=checkpointing,
            fast=fast,
        ).as_dict()
        for n in gpus
    ]


def trainer_budget(
    model,
    head,
    n_aux: int,
    steps: int,
    tokens_per_rank: int,
    world: int,
    fsdp: bool,
    device: str,
    *,
    checkpointing: bool = False,
    dtype_bytes: int = 2,
    fast: bool = False,
    target_bytes: int | None = None,
) -> Budget:
    """The estimate for a built drafter (its frozen tensors as it holds them), one row of
    `tokens_per_rank` tokens; `target_bytes`: what the target holds on the device (the
    trainer's `target.device_bytes()`; default: the head, as a captured target). EAGLE-3's FLOPs
    are `step_flops`; another method's (DFlash) an approximation: 6 x its trainable parameters
    per drafted slot + 2 x the target's head per token, and its activations the EAGLE-3
    layer's count with its block slots as the steps."""
    cfg = model.config
    shape = ActivationShape.of_config(cfg)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = [p for p in model.parameters() if not p.requires_grad]
    frozen_bytes = sum(p.numel() * p.element_size() for p in frozen)
    frozen_bytes += head.numel() * head.element_size() if target_bytes is None else target_bytes
    vocab, t = head.shape[0], tokens_per_rank
    from eyas.drafter.registry import METHODS

    method = METHODS.get(str(getattr(cfg, "method", "")))
    # the fast path's rows were measured on EAGLE-3's step; another method's is the reference's
    fast = fast and method is not None and method.fast_path_measured
    if method is not None and method.exact_step_flops:
        flops = None
        head_trained = model.lm_head.weight.requires_grad
        draft_vocab = cfg.draft_vocab_size
    else:
        flops = {"layers": 6 * trainable * steps * t, "teacher": 2 * t * head.numel()}
        head_trained, draft_vocab = False, vocab
    return estimate(
        shape=shape,
        n_aux=n_aux,
        ttt=steps,
        trainable_params=trainable,
        frozen_params=sum(p.numel() for p in frozen) + head.numel(),
        frozen_bytes=frozen_bytes,
        vocab=vocab,
        draft_vocab=draft_vocab,
        head_trained=head_trained,
        tokens_per_rank=t,
        world=world,
        fsdp=fsdp,
        device_name=device_name(device),
        checkpointing=checkpointing,
        dtype_bytes=dtype_bytes,
        fast=fast,
        flops=flops,
    )
