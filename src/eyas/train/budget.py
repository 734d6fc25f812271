"""What a training run will need per GPU, printed by `eyas train` before it starts.

An estimate from the drafter's parameter counts and the run's settings (the formula is in
docs/training-scale.md):

- trainable state: 16 B per trainable parameter (fp32 weight, fp32 gradient, AdamW's two fp32
  moments), divided by the world size under FSDP2, whole on every rank under DDP;
- frozen target tensors (embedding, lm_head): their bytes, on every rank (never sharded);
- activations: `ACT_BYTES_PER_TOKEN_STEP_PER_HIDDEN * hidden` per token per drafted step (TTT)
  for the tokens of one micro-batch on this rank (the decoder layer is not checkpointed);
- input states: (aux layers + 1) x hidden x 2 B per token of the micro-batch (bf16);
- host index: 5 B per token plus ~40 B per sample (`SequenceIndex`).

Throughput: training FLOPs per token = 6 x (decoder layer + draft head parameters) per drafted
step + 6 x fc parameters + 2 x frozen head parameters (the teacher's logits, forward only),
at an assumed fraction (MFU) of the device's dense bf16 peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# Activation bytes per token per drafted step, per unit of hidden size: ~100 x H, i.e. 0.7 MB
# at Kimi width (H = 7168), inside the 0.5-0.9 MB the issue-28 estimate gives.
ACT_BYTES_PER_TOKEN_STEP_PER_HIDDEN = 100
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
) -> Budget:
    """`layer_params`, `head_params`, `fc_params`: trainable parameters run per drafted step
    (decoder layer), per drafted step (draft head) and once per token (fc); `frozen_bytes`:
    the frozen tensors held on the device; `teacher_head_params`: the target's lm_head, run
    forward once per token for the teacher's logits."""
    trainable = layer_params + head_params + fc_params
    gb = 1e9
    trainable_gb = 16 * trainable / (world if fsdp else 1) / gb
    frozen_gb = frozen_bytes / gb
    act_gb = ACT_BYTES_PER_TOKEN_STEP_PER_HIDDEN * hidden * steps * tokens_per_rank / gb
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
    )


def device_peak(device: str) -> float | None:
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def kimi_table(gpus: tuple[int, ...] = (1, 8, 16), tokens_per_rank: int = 16_384) -> list[dict]:
    """The Kimi-K2.5 drafter (issue 28's counts: fc 154M, attention 411M, MLP 264M, draft head
    229M; frozen 163,840 x 7168 embedding and head in bf16) at TTT 7 on H200s, FSDP2."""
    return [
        estimate(
            hidden=7168,
            n_aux=3,
            steps=7,
            layer_params=411_000_000 + 264_000_000,
            head_params=229_000_000,
            fc_params=154_000_000,
            frozen_params=2 * 163_840 * 7168,
            frozen_bytes=2 * 2 * 163_840 * 7168,
            teacher_head_params=163_840 * 7168,
            tokens_per_rank=tokens_per_rank,
            world=n,
            fsdp=True,
            peak_flops=PEAK_BF16["H200"],
        ).as_dict()
        for n in gpus
    ]


def trainer_budget(
    model, head, n_aux: int, steps: int, tokens_per_rank: int, world: int, fsdp: bool, device: str
) -> Budget:
    """The estimate for a built drafter: parameters named `fc*` run once per token, every other
    trainable one per drafted step (an upper bound for methods whose layers run once)."""
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
    )
