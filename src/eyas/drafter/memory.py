"""Activation memory of drafter training, and when to trade it for compute.

Activation checkpointing (AC) keeps, per TTT step (per draft layer for DFlash), only what the
next step reads (the fed-back hidden state, the normalised state the loss reads, the step's
keys and values) and recomputes the layer's inside in backward: one more forward of the layer
per step. `auto` turns it on for micro-batches of more than `ac_threshold` tokens (rows x
width, padding included: what the activations scale with). The threshold is
`--activation-checkpointing-above`; left unset it is `AC_AUTO_TOKENS` off a GPU, and on a GPU
the most tokens whose step fits `AC_OFF_SHARE` of its memory without AC by the per-GPU estimate
(`eyas.train.budget.auto_checkpointing_above`, which `eyas train` resolves once at setup), at
least `AC_AUTO_TOKENS`. AC costs a forward of the layer per step (at 16k tokens on an H200 the
step took 15-17% longer with it, bench/results/train_h200_reference.json), so it is paid only
where memory asks for it. bench/bench_train_memory.py measures the saving and the step-time
cost; docs/training-checkpoints.md quotes them.

`activation_elements_per_token` counts a drafter's activations by element from its shape (MHA
or MLA attention, TTT steps, AC on or off); it is the one count of them: `default_max_len` (the
`--max-len` used when none is given: the longest sample whose activations fit half the device,
capped by the target's context) and the per-GPU estimate `eyas train` prints
(`eyas.train.budget`) both use it. An estimate, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eyas.drafter.settings import MethodTrainSettings

AC_AUTO_TOKENS = 4096  # auto's threshold where the device's memory is not read (CPU)
# Of a GPU's memory, what auto lets a step without AC take by the estimate: the estimate is
# within 10% of every measured H200 peak (tests/train/test_budget.py), so 0.8 leaves room for
# its error and the allocator's fragmentation.
AC_OFF_SHARE = 0.8
MIN_DEFAULT_MAX_LEN = 2048
DEVICE_SHARE = 0.5  # of the device's memory, for activations (the rest: weights, optimizer, slack)


def ac_threshold(train_cfg: MethodTrainSettings) -> int:
    """Tokens per micro-batch above which `auto` recomputes (module docstring)."""
    return getattr(train_cfg, "activation_checkpointing_above", None) or AC_AUTO_TOKENS


def checkpointing_on(train_cfg: MethodTrainSettings, tokens: int) -> bool:
    """Whether a micro-batch of `tokens` tokens (rows x width, padding included) recomputes
    the drafter's layer in backward."""
    mode = getattr(train_cfg, "activation_checkpointing", "off")
    return mode == "on" or (mode == "auto" and tokens > ac_threshold(train_cfg))


@dataclass(frozen=True)
class ActivationShape:
    """The widths the activation count reads from a drafter's layer. MHA: `qk_head_dim` =
    `v_head_dim` = head_dim and no ranks; MLA (`eyas.drafter.mla`): `qk_head_dim` = nope + rope,
    and the low ranks its projections pass through."""

    hidden: int
    target_hidden: int
    heads: int
    qk_head_dim: int
    v_head_dim: int
    intermediate: int
    q_lora_rank: int | None = None  # MLA; None: q projected directly
    kv_lora_rank: int = 0  # MLA; 0: MHA
    qk_rope_head_dim: int = 0  # MLA
    kv_heads: int = 0  # MHA's key/value heads (GQA); 0: as many as the query heads

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def key_heads(self) -> int:
        """Heads of the keys and values a step keeps (MLA: every query head's)."""
        return self.heads if self.mla else (self.kv_heads or self.heads)

    @classmethod
    def mha(
        cls,
        hidden: int,
        target_hidden: int,
        heads: int,
        head_dim: int,
        intermediate: int,
        kv_heads: int = 0,
    ) -> ActivationShape:
        return cls(
            hidden, target_hidden, heads, head_dim, head_dim, intermediate, kv_heads=kv_heads
        )

    @classmethod
    def of_config(cls, cfg: Any) -> ActivationShape:
        """From a drafter config (`Eagle3Config`, `DFlashConfig`)."""
        if getattr(cfg, "attention", "mha") == "mla":
            return cls(
                cfg.hidden_size,
                cfg.target_hidden_size,
                cfg.num_attention_heads,
                cfg.qk_nope_head_dim + cfg.qk_rope_head_dim,
                cfg.v_head_dim,
                cfg.intermediate_size,
                cfg.q_lora_rank,
                cfg.kv_lora_rank,
                cfg.qk_rope_head_dim,
            )
        return cls.mha(
            cfg.hidden_size,
            cfg.target_hidden_size,
            cfg.num_attention_heads,
            cfg.head_dim,
            cfg.intermediate_size,
            getattr(cfg, "num_key_value_heads", 0) or 0,
        )


def _kept_kv(s: ActivationShape) -> int:
    """Keys and values one step keeps per token. MHA: k and v repeated to every head. MLA: k
    ([nope ; rope] per head) and v, a view of kv_b_proj's [nope ; v] output, which it keeps."""
    h = s.heads
    if s.mla:
        return h * s.qk_head_dim + h * (s.qk_head_dim - s.qk_rope_head_dim + s.v_head_dim)
    return h * (s.qk_head_dim + s.v_head_dim)


def _attention_inside(s: ActivationShape) -> int:
    """The attention's elements per token inside one step (what AC recomputes).

    MHA: q, k (projected, rotated) and v (projected): 4 h qk + h v. MLA: the low-rank
    projections and their norms (2 q_lora, kv_lora + rope, kv_lora), q and kv_b_proj's
    [nope ; v] (h qk + h (nope + v)), the rotated rope parts (h rope + rope); `ttt_attention`
    then pads q, k, v to one width w = max(qk, v) when they differ, of which the padded q is
    saved (h w). Both: the sink-padded q, k, v (3 h w), the kernel's output, its fp32 merge
    (counted twice) and the copy o_proj reads (3 h w + h v)."""
    h, qk, v = s.heads, s.qk_head_dim, s.v_head_dim
    w = max(qk, v)
    if s.mla:
        rope, nope = s.qk_rope_head_dim, qk - s.qk_rope_head_dim
        low = 2 * (s.q_lora_rank or 0) + 2 * s.kv_lora_rank + rope
        proj = low + h * qk + h * (nope + v) + h * rope + rope
        pad = h * w if qk != v else 0
    else:
        proj, pad = 4 * h * qk + h * v, 0
    return proj + pad + 3 * h * w + 3 * h * w + h * v


def activation_elements_per_token(shape: ActivationShape, ttt: int, checkpointing: bool) -> int:
    """Elements of activations per trained token at `ttt` steps (the one count both
    `default_max_len` and `eyas.train.budget` use):

    - kept whatever the mode: the 3 fused target states and the final state (4 Ht), the fused
      hidden (H);
    - kept per step with AC: the fed-back and normalised states (2H), the step's keys and
      values (`_kept_kv`), the loss's shifted teacher state (Ht);
    - kept per step without AC, in addition: the layer's inside (norms, the 2H attention input,
      residuals: 10 H; the attention's, `_attention_inside`; the MLP's 4 I); with AC one
      step's worth is live at a time, during its recompute;
    - MLA only: step s pads the keys and values of the s earlier steps to one width, so this
      term grows with the square of `ttt` without AC.

    Not counted: under bf16 the diagonal merge's fp32 copies of earlier steps' values.

    For MHA at head_dim d this is the per step 2 H + 2 h d + Ht and inside 10 H + 12 h d + 4 I
    that docs/training-checkpoints.md gives.
    """
    s = shape
    kept = 4 * s.target_hidden + s.hidden
    step = 2 * s.hidden + _kept_kv(s) + s.target_hidden
    inside = 10 * s.hidden + _attention_inside(s) + 4 * s.intermediate
    # MLA's q/k and v widths differ, so each step pads the k, v of every earlier step it attends
    # on the diagonal (2 h w each): 0 + 1 + ... + (ttt - 1) earlier steps in all
    pad = 2 * s.heads * max(s.qk_head_dim, s.v_head_dim) if s.qk_head_dim != s.v_head_dim else 0
    if checkpointing:  # one step's inside, the last one's pads included, live at a time
        return kept + ttt * step + inside + (ttt - 1) * pad
    return kept + ttt * (step + inside) + ttt * (ttt - 1) // 2 * pad


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
    """Bytes of activations per trained token of an MHA drafter at `ttt` steps
    (`activation_elements_per_token` times the element size: 2 under bf16, 4 in fp32)."""
    shape = ActivationShape.mha(hidden, target_hidden, heads, head_dim, intermediate)
    return dtype_bytes * activation_elements_per_token(shape, ttt, checkpointing)


def device_memory_bytes(device: str) -> int:
    """Memory of the training device: the GPU's, or this machine's RAM per local rank."""
    import os

    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.device(device)).total_memory
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // max(1, ranks)


def target_activation_shape(
    target: Any, train_cfg: MethodTrainSettings, attentions: tuple[str, ...]
) -> ActivationShape:
    """The activation shape of the drafter `train_cfg` builds for `target`: MLA when the
    method's layer comes in MLA (`attentions`, its `DraftMethod.attentions()`) and gets the
    target's attention (`--attention`, default MLA on MLA targets); otherwise MHA (DFlash's
    layer, and P-EAGLE's, which builds EAGLE-3's MHA layer on an MLA target)."""
    from eyas.drafter.mla import MLAShape, is_mla_target
    from eyas.drafter.shape import drafter_shape

    shape = drafter_shape(
        target,
        num_attention_heads=train_cfg.num_attention_heads,
        head_dim=train_cfg.head_dim,
        intermediate_size=train_cfg.intermediate_size,
    )
    attention = getattr(train_cfg, "attention", None) or ("mla" if is_mla_target(target) else "mha")
    h, hidden = shape.num_attention_heads, target.hidden_size
    if attention == "mla" and "mla" in attentions:
        m = MLAShape.of_target(target)
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        return ActivationShape(
            hidden, hidden, h, qk, m.v_head_dim, shape.intermediate_size,
            m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim,
        )  # fmt: skip
    return ActivationShape.mha(
        hidden, hidden, h, shape.head_dim, shape.intermediate_size, shape.num_key_value_heads
    )


def default_max_len(
    target: Any, train_cfg: MethodTrainSettings, device: str, attentions: tuple[str, ...]
) -> int:
    """The largest power of two of tokens whose activations fit `DEVICE_SHARE` of the device
    with AC as `auto` would set it (on at that width), at least 2,048, at most the target's
    context; `attentions` the method's (`target_activation_shape`)."""
    ac = getattr(train_cfg, "activation_checkpointing", "auto") != "off"
    dtype_bytes = 2 if device.startswith("cuda") else 4
    shape = target_activation_shape(target, train_cfg, attentions)
    per_token = dtype_bytes * activation_elements_per_token(shape, train_cfg.ttt, ac)
    fits = int(DEVICE_SHARE * device_memory_bytes(device)) // per_token
    length = MIN_DEFAULT_MAX_LEN
    while length * 2 <= fits:
        length *= 2
    return min(target.context_length, length)
