"""What a training run will need per GPU, printed by `eyas train` before it starts.

An estimate from the drafter's parameter counts and the run's settings (the formula is in
docs/training-scale.md):

- trainable state: 16 B per trainable parameter (fp32 weight, fp32 gradient, AdamW's two fp32
  moments), divided by the world size under FSDP2, whole on every rank under DDP;
- frozen target tensors (embedding, lm_head): their bytes, on every rank (never sharded);
- activations: `eyas.drafter.memory.activation_elements_per_token` (counted by element from the
  drafter's shape: MHA or MLA, drafted steps, activation checkpointing on or off) times the
  element size (2 B under bf16, 4 in fp32), for the tokens of one micro-batch on this rank;
- input states: (aux layers + 1) x hidden x 2 B per token of the micro-batch (bf16);
- host index: 5 B per token plus ~40 B per sample (`SequenceIndex`).

Throughput: training FLOPs per token = 6 x (decoder layer + draft head parameters) per drafted
step + 6 x fc parameters + 2 x frozen head parameters (the teacher's logits, forward only),
at an assumed fraction (MFU) of the device's dense bf16 peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from eyas.drafter.memory import ActivationShape, activation_elements_per_token

ASSUMED_MFU = 0.35
# Dense bf16 peak (FLOP/s) by device name fragment; None: no throughput estimate.
PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "B200": 2250e12}


@dataclass
class Budget:
    world: int
    fsdp: bool
    trainable_params: int
    frozen_params: int
    tokens_per_rank: int  # one micro-batch on one rank
    trainable_gb: float
    frozen_gb: float
    activations_gb: float
    states_gb: float
    total_gb: float
    gflop_per_token: float
    tokens_per_s: float | None  # for the whole run (all ranks); None without a known peak
    activation_checkpointing: bool = False
    attention: str = "mha"

    def line(self) -> str:
        speed = (
            f", ~{self.tokens_per_s / 1e3:,.1f}k tokens/s over {self.world} GPU(s) at "
            f"{ASSUMED_MFU:.0%} MFU"
            if self.tokens_per_s
            else ""
        )
        return (
            f"memory estimate per GPU: {self.total_gb:.1f} GB (trainable state "
            f"{self.trainable_gb:.1f}, frozen target tensors {self.frozen_gb:.1f}, activations "
            f"{self.activations_gb:.1f} for {self.tokens_per_rank:,} tokens, input states "
            f"{self.states_gb:.2f}); {self.gflop_per_token:.0f} GFLOP per token{speed}"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def estimate(
    *,
    hidden: int,
    n_aux: int,
    steps: int,
    layer_params: int,
    head_params: int,
    fc_params: int,
    frozen_params: int,
    frozen_bytes: int,
    teacher_head_params: int,
    tokens_per_rank: int,
    world: int,
    fsdp: bool,
    peak_flops: float | None,
    shape: ActivationShape,
    checkpointing: bool = False,
    dtype_bytes: int = 2,
) -> Budget:
    """`layer_params`, `head_params`, `fc_params`: trainable parameters run per drafted step
    (decoder layer), per drafted step (draft head) and once per token (fc); `frozen_bytes`:
    the frozen tensors held on the device; `teacher_head_params`: the target's lm_head, run
    forward once per token for the teacher's logits; `shape`, `checkpointing`, `dtype_bytes`:
    the drafter's layer, AC and the activations' element size, for the activation count."""
    trainable = layer_params + head_params + fc_params
    gb = 1e9
    trainable_gb = 16 * trainable / (world if fsdp else 1) / gb
    frozen_gb = frozen_bytes / gb
    per_token = dtype_bytes * activation_elements_per_token(shape, steps, checkpointing)
    act_gb = per_token * tokens_per_rank / gb
    states_gb = (n_aux + 1) * hidden * 2 * tokens_per_rank / gb
    flops = 6 * (layer_params + head_params) * steps + 6 * fc_params + 2 * teacher_head_params
    rate = peak_flops * ASSUMED_MFU / flops * world if peak_flops else None
    return Budget(
        world=world,
        fsdp=fsdp,
        trainable_params=trainable,
        frozen_params=frozen_params,
        tokens_per_rank=tokens_per_rank,
        trainable_gb=round(trainable_gb, 2),
        frozen_gb=round(frozen_gb, 2),
        activations_gb=round(act_gb, 2),
        states_gb=round(states_gb, 3),
        total_gb=round(trainable_gb + frozen_gb + act_gb + states_gb, 2),
        gflop_per_token=round(flops / 1e9, 1),
        tokens_per_s=round(rate) if rate else None,
        activation_checkpointing=checkpointing,
        attention="mla" if shape.mla else "mha",
    )


def device_peak(device: str) -> float | None:
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


# The Kimi-K2.5 drafter's widths: hidden 7168, 64 heads, MLP 12288; MHA heads of 128 (issue
# 28's drafter, the published lightseekorg/kimi-k2.5-eagle3), MLA with the target's ranks.
KIMI_HIDDEN, KIMI_HEADS, KIMI_MLP, KIMI_VOCAB = 7168, 64, 12288, 163_840
KIMI_MHA = ActivationShape.mha(KIMI_HIDDEN, KIMI_HIDDEN, KIMI_HEADS, 128, KIMI_MLP)
KIMI_MLA = ActivationShape(KIMI_HIDDEN, KIMI_HIDDEN, KIMI_HEADS, 192, 128, KIMI_MLP, 1536, 512, 64)


def attention_params(shape: ActivationShape) -> int:
    """Weights of the EAGLE-3 layer's attention over its 2H input (MHA: q/k/v/o; MLA: the
    projections and norms of `eyas.drafter.mla.MLAAttention`)."""
    x, h, qk, v = 2 * shape.hidden, shape.heads, shape.qk_head_dim, shape.v_head_dim
    out = h * v * shape.hidden
    if not shape.mla:
        return x * h * (2 * qk + v) + out
    q_lora, kv_lora, rope = shape.q_lora_rank, shape.kv_lora_rank, shape.qk_rope_head_dim
    q = x * q_lora + q_lora + q_lora * h * qk if q_lora else x * h * qk
    kv = x * (kv_lora + rope) + kv_lora + kv_lora * h * (qk - rope + v)
    return q + kv + out


def kimi_table(
    gpus: tuple[int, ...] = (1, 8, 16),
    tokens_per_rank: int = 16_384,
    checkpointing: bool = False,
    attention: str = "mha",
) -> list[dict]:
    """The Kimi-K2.5 drafter (issue 28's counts: fc 154M, attention 411M with MHA, MLP 264M,
    draft head 229M; frozen 163,840 x 7168 embedding and head in bf16) at TTT 7 on H200s,
    FSDP2, bf16 activations; `attention="mla"` swaps in the MLA attention's own weights."""
    shape = KIMI_MLA if attention == "mla" else KIMI_MHA
    mlp = 3 * KIMI_HIDDEN * KIMI_MLP
    return [
        estimate(
            hidden=KIMI_HIDDEN,
            n_aux=3,
            steps=7,
            layer_params=attention_params(shape) + mlp,
            head_params=229_000_000,
            fc_params=154_000_000,
            frozen_params=2 * KIMI_VOCAB * KIMI_HIDDEN,
            frozen_bytes=2 * 2 * KIMI_VOCAB * KIMI_HIDDEN,
            teacher_head_params=KIMI_VOCAB * KIMI_HIDDEN,
            tokens_per_rank=tokens_per_rank,
            world=n,
            fsdp=True,
            peak_flops=PEAK_BF16["H200"],
            shape=shape,
            checkpointing=checkpointing,
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
) -> Budget:
    """The estimate for a built drafter: parameters named `fc*` run once per token, every other
    trainable one per drafted step (an upper bound for methods whose layers run once); the
    activations counted from `model.config`'s shape (DFlash: its block slots as the steps, an
    approximation by the EAGLE-3 layer's count)."""
    fc = per_step = frozen = frozen_bytes = 0
    for name, p in model.named_parameters():
        if not p.requires_grad:
            frozen += p.numel()
            frozen_bytes += p.numel() * p.element_size()
        elif name.split(".")[0].startswith("fc"):
            fc += p.numel()
        else:
            per_step += p.numel()
    return estimate(
        hidden=head.shape[1],
        n_aux=n_aux,
        steps=steps,
        layer_params=per_step,
        head_params=0,
        fc_params=fc,
        frozen_params=frozen + head.numel(),
        frozen_bytes=frozen_bytes + head.numel() * head.element_size(),
        teacher_head_params=head.numel(),
        tokens_per_rank=tokens_per_rank,
        world=world,
        fsdp=fsdp,
        peak_flops=device_peak(device),
        shape=ActivationShape.of_config(model.config),
        checkpointing=checkpointing,
        dtype_bytes=dtype_bytes,
    )
