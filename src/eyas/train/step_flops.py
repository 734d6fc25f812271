"""FLOPs of one EAGLE-3 training micro-batch (forward + backward), as a formula of the drafter's
shape: the count `torch.utils.flop_counter.FlopCounterMode` makes of eyas's own step
(`eyas.testing.step_cost.count_flops`; `tests/train/test_flops.py` holds the two equal for MHA
and MLA, both paths, activation checkpointing on and off, the draft head trained and frozen).

FlopCounterMode's conventions: a matmul [m, k] x [k, n] is 2mkn; an attention kernel is its
dense count (`sdpa_flop_count`, `sdpa_backward_flop_count`: no discount for the causal mask,
as FlopCounterMode counts FlexAttention and SDPA on CUDA); elementwise work is free. Terms:

- `fc`: forward and the weight's gradient (the target's states carry none);
- `layer`: each TTT step's matmuls (attention projections, MLP) forward, input and weight
  gradients; activation checkpointing adds one forward per step;
- `attention`: the kernel per step (fast path: FlexAttention over step 0's keys, kv heads as
  they are; reference: SDPA over keys repeated to every head, MLA's padded to one width, and
  from step 1 on a sink key and 8 sink dims; `eagle3.model`);
- `head`: the draft head per step (fast: logits, d/dx and, trained, d/dW on the T - 1 - k
  indices with a teacher, nothing recomputed; reference: logits on all T, recomputed in
  backward, then d/dx and, trained, d/dW);
- `teacher`: the target's head (fast: one pass over the full vocabulary per micro-batch, its
  draft columns reused; reference: the full-vocabulary argmax once, the draft rows' logits per
  step and again in backward).
"""

from __future__ import annotations

from eyas.drafter.memory import ActivationShape

SINK_DIMS = 8  # eagle3.model._SINK_DIMS: the reference attention's sink


def attention_linear_params(s: ActivationShape) -> int:
    """Weights of the EAGLE-3 layer's attention matmuls over its 2H input (no norms)."""
    x, h, qk, v = 2 * s.hidden, s.heads, s.qk_head_dim, s.v_head_dim
    out = h * v * s.hidden
    if not s.mla:
        return x * h * qk + x * s.key_heads * (qk + v) + out
    q_lora, kv_lora, rope = s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim
    q = x * q_lora + q_lora * h * qk if q_lora else x * h * qk
    return q + x * (kv_lora + rope) + kv_lora * h * (qk - rope + v) + out


def layer_linear_params(s: ActivationShape) -> int:
    """Attention matmuls plus the SwiGLU MLP's three."""
    return attention_linear_params(s) + 3 * s.hidden * s.intermediate


def kernel_flops(q, k, v) -> tuple[int, int]:
    """(forward, backward) FLOPs of an attention kernel on these [B, heads, len, dim] shapes, as
    torch.utils.flop_counter's `sdpa_flop_count` and `sdpa_backward_flop_count` count them (every
    query head against the keys; GQA's kv heads are read, not repeated, but the products are the
    query heads'): forward q.k^T and p.v; backward the scores again, dO.v^T, p^T.dO, dS.k and
    dS^T.q. Written out because torch before 2.13 refuses GQA shapes there
    (`tests/train/test_flops.py` holds it equal to torch's)."""
    b, h, s_q, d_q = q
    s_k, d_v = k[2], v[3]
    pair = 2 * b * h * s_q * s_k
    return pair * (d_q + d_v), pair * (3 * d_q + 2 * d_v)


def attention_flops(s: ActivationShape, tokens: int, ttt: int, checkpointing: bool, fast: bool):
    t, h, dq, dv = tokens, s.heads, s.qk_head_dim, s.v_head_dim
    if fast:
        kv = s.key_heads
        per_step = [kernel_flops((1, h, t, dq), (1, kv, t, dq), (1, kv, t, dv))] * ttt
    else:
        w = max(dq, dv)
        first = kernel_flops((1, h, t, w), (1, h, t, w), (1, h, t, w))
        sink = (1, h, t + 1, w + SINK_DIMS)
        per_step = [first] + [kernel_flops(sink, sink, sink)] * (ttt - 1)
    return sum(f * (2 if checkpointing else 1) + b for f, b in per_step)


def step_flops(
    shape: ActivationShape,
    *,
    tokens: int,
    ttt: int,
    n_aux: int,
    vocab: int,
    draft_vocab: int,
    head_trained: bool,
    checkpointing: bool,
    fast: bool,
) -> dict[str, int]:
    """FLOPs of one micro-batch of `tokens` positions (one row), by term (module docstring)."""
    t, hid, th = tokens, shape.hidden, shape.target_hidden
    fc = n_aux * th * hid
    head = hid * draft_vocab
    if fast:
        with_teacher = sum(max(0, t - 1 - k) for k in range(ttt))
        head_flops = (4 + 2 * head_trained) * with_teacher * head
        teacher = 2 * t * th * vocab
    else:
        head_flops = ttt * (6 + 2 * head_trained) * t * head
        teacher = 2 * t * th * vocab + ttt * 4 * t * th * draft_vocab
    return {
        "fc": 4 * t * fc,
        "layer": ttt * (6 + 2 * checkpointing) * t * layer_linear_params(shape),
        "attention": attention_flops(shape, t, ttt, checkpointing, fast),
        "head": head_flops,
        "teacher": teacher,
    }
