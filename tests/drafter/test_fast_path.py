"""The fast training path (`eyas.drafter.fast_path`) computes the reference path's function.

Tolerances (stated once, here and in docs/training-scale.md):
- fp32 (no autocast): the loss and every per-step figure equal to 1e-5 relative, each
  parameter's gradient to 1e-4 in relative L2 norm (measured: loss identical, gradients
  ~1e-6: the two paths sum in different orders);
- bf16 autocast: the loss to 1e-3 relative, each parameter's gradient to 3e-2 in relative L2
  norm (measured ~7e-3): bf16 operands carry 8 bits, the fast path keeps the teacher's logits
  and its merge weights in bf16 where the reference computes them in fp32, and the argmax
  figures may differ on near-ties (allowed: one position per step).

The attention kernel itself is FlexAttention's: on CPU its eager dense implementation, which
PyTorch tests its compiled kernels against; the GPU benchmark (`bench/bench_train_gpu.py`)
repeats the comparison there on the compiled kernel before it times anything.
"""

import math
import types
import warnings

import pytest
import torch

from eyas.drafter.eagle3.model import (
    Eagle3Config,
    Eagle3Drafter,
    ttt_attention,
    ttt_attention_fast,
)
from eyas.drafter.fast_path import fast_path_on, loss_compiled
from eyas.drafter.loss import Teacher, resolved
from eyas.drafter.registry import get_method

pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention.*")
V, DV, H = 300, 120, 64


def test_the_causal_block_mask_is_flex_attentions_own():
    from torch.nn.attention.flex_attention import create_block_mask

    from eyas.drafter.flex import causal_block_mask

    for t in (1, 100, 128, 300):
        built = causal_block_mask(t, torch.device("cpu"))
        ref = create_block_mask(lambda b, h, q, k: q >= k, None, None, t, t, device="cpu")
        assert torch.equal(built.to_dense(), ref.to_dense()), t
        assert built.seq_lengths == (t, t)


def test_the_cpu_entry_point_is_the_public_api_and_differentiates_the_lse():
    """`_eager_flex` (the higher-order op, what the CPU runs) against the public
    `flex_attention` (what CUDA compiles) and against dense attention in fp64, GQA and values
    narrower than the keys included; the gradient flows through the log-sum-exp."""
    from torch.nn.attention.flex_attention import flex_attention

    from eyas.drafter.flex import causal_attention, causal_block_mask

    torch.manual_seed(0)
    b, h, kv, t, dq, dv = 2, 4, 2, 150, 24, 16
    q = torch.randn(b, h, t, dq, dtype=torch.float64, requires_grad=True)
    k = torch.randn(b, kv, t, dq, dtype=torch.float64, requires_grad=True)
    v = torch.randn(b, kv, t, dv, dtype=torch.float64, requires_grad=True)
    out, lse = causal_attention(q, k, v, 0.3)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mask = causal_block_mask(t, q.device)
        pub, pub_lse = flex_attention(
            q.detach(), k.detach(), v.detach(), block_mask=mask, scale=0.3, enable_gqa=True,
            return_lse=True,
        )  # fmt: skip
    assert torch.allclose(out, pub, atol=1e-12) and torch.allclose(lse, pub_lse, atol=1e-12)
    scores = q @ k.repeat_interleave(2, 1).transpose(-1, -2) * 0.3
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), -math.inf)
    ref, ref_lse = torch.softmax(scores, -1) @ v.repeat_interleave(2, 1), scores.logsumexp(-1)
    assert torch.allclose(out, ref, atol=1e-10) and torch.allclose(lse, ref_lse, atol=1e-10)
    w = torch.randn(b, h, t, dtype=torch.float64)
    got = torch.autograd.grad(out.sum() + (lse * w).sum(), [q, k, v])
    want = torch.autograd.grad(ref.sum() + (ref_lse * w).sum(), [q, k, v])
    for a, e in zip(got, want):
        assert torch.allclose(a, e, atol=1e-10)


@pytest.mark.parametrize(
    "steps,compiled", [(0, False), (1, False), (3, False), (1, True), (3, True)]
)
@pytest.mark.parametrize("shape", ["gqa", "mla"])
def test_the_fast_attention_is_the_reference_attention(steps, compiled, shape):
    """Same output and gradients as `ttt_attention` (which gets every kv head repeated), for
    grouped heads (4 query heads on 2 kv heads) and MLA's narrower values (q/k 24, v 16); also
    with the merge compiled (`--fast-path compiled`, inductor's CPU backend here)."""
    torch.manual_seed(1)
    b, h, t = 2, 4, 150
    kv, dq, dv = (2, 16, 16) if shape == "gqa" else (4, 24, 16)

    def leaf(*size):
        return torch.randn(*size, dtype=torch.float64, requires_grad=True)

    q, k0, v0 = leaf(b, h, t, dq), leaf(b, kv, t, dq), leaf(b, kv, t, dv)
    diagonal = [(leaf(b, kv, t, dq), leaf(b, kv, t, dv)) for _ in range(steps)]

    def rep(x):
        return x.repeat_interleave(h // kv, 1)

    ref = ttt_attention(q, rep(k0), rep(v0), [(rep(a), rep(c)) for a, c in diagonal], 0.25)
    fast = ttt_attention_fast(q, k0, v0, diagonal, 0.25, compiled=compiled)
    # the reference merges in fp32 whatever its inputs: fp32 rounding is the bound
    assert torch.allclose(fast, ref, atol=1e-5)
    w = torch.randn_like(ref)
    leaves = [q, k0, v0, *[x for pair in diagonal for x in pair]]
    for a, e in zip(
        torch.autograd.grad((fast * w).sum(), leaves), torch.autograd.grad((ref * w).sum(), leaves)
    ):
        assert torch.allclose(a, e, atol=1e-5)


def _drafter(attention: str, v31: bool, head: str, draft_vocab: int = DV) -> Eagle3Drafter:
    kw = dict(
        hidden_size=H,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,  # GQA
        head_dim=16,
        vocab_size=V,
        draft_vocab_size=draft_vocab,
        target_hidden_size=H,
        aux_layer_ids=[1, 2, 3],
        fc_norm=v31,
        norm_output=v31,
        draft_head=head,
    )
    if attention == "mla":
        kw |= dict(
            attention="mla",
            num_key_value_heads=4,
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
        )
    torch.manual_seed(0)
    model = Eagle3Drafter(Eagle3Config(**kw))
    ids = torch.sort(torch.randperm(V, generator=torch.Generator().manual_seed(1))[:draft_vocab])
    model.d2t.copy_(ids.values - torch.arange(draft_vocab))
    model.t2d.zero_()
    model.t2d[ids.values] = True
    return model


def _batch(b: int = 2, t: int = 100):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, V, (b, t), generator=g)
    supervised = (torch.rand(b, t, generator=g) > 0.3).long()
    supervised[-1, 80:] = 0  # a right-padded row
    aux = torch.randn(b, t, 3 * H, generator=g)
    final = torch.randn(b, t, H, generator=g)
    head = torch.randn(V, H, generator=g) * 0.5
    return ids, supervised, aux, Teacher(final, head)


def _step(model, method_name, fast, ac="off", autocast=False, ttt=4, mode=None):
    method = get_method(method_name)
    cfg = types.SimpleNamespace(
        ttt=ttt,
        fast_path=mode or ("on" if fast else "off"),
        activation_checkpointing=ac,
        loss_decay=0.8,
        # 7 chunks per row: a trained head's gradient is summed over 4 (fused_loss.
        # WEIGHT_GRAD_CHUNKS), then over the row's last 3
        chunk_len=16,
    )
    ids, supervised, aux, teacher = _batch()
    model.zero_grad(set_to_none=True)
    prep = method.prepare(model, ids, supervised, train_cfg=cfg, seeds=[0, 0])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, stats = method.loss(
            model,
            model,
            prep,
            aux=aux,
            teacher=teacher,
            normalizer=prep.counts.tolist(),
            train_cfg=cfg,
        )
        loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach()), resolved(stats), grads


def _agree(ref, fast, loss_tol, grad_tol, exact_counts):
    (l1, s1, g1), (l2, s2, g2) = ref, fast
    assert l2 == pytest.approx(l1, rel=loss_tol)
    assert sorted(g1) == sorted(g2)
    for name in g1:
        err = float((g1[name] - g2[name]).norm() / g1[name].norm().clamp_min(1e-30))
        assert err <= grad_tol, (name, err)
    for a, b in zip(s1, s2, strict=True):
        assert b.loss_sum == pytest.approx(a.loss_sum, rel=loss_tol)
        assert (b.positions, b.in_vocab) == (a.positions, a.in_vocab)
        assert abs(b.correct - a.correct) <= (0 if exact_counts else 1)


@pytest.mark.parametrize(
    "attention,method,ac,head",
    [
        ("mha", "eagle3", "off", "trained"),
        ("mha", "eagle3.1", "on", "frozen"),
        ("mla", "eagle3", "on", "trained"),
        ("mla", "eagle3.1", "off", "frozen"),
    ],
)
def test_the_fast_step_is_the_reference_step_in_fp32(attention, method, ac, head):
    model = _drafter(attention, method == "eagle3.1", head)
    ref = _step(model, method, fast=False, ac=ac)
    fast = _step(model, method, fast=True, ac=ac)
    _agree(ref, fast, 1e-5, 1e-4, exact_counts=True)
    assert ("lm_head.weight" in fast[2]) == (head == "trained")


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_the_fast_step_is_the_reference_step_under_bf16(attention):
    model = _drafter(attention, False, "trained")
    ref = _step(model, "eagle3", fast=False, autocast=True)
    fast = _step(model, "eagle3", fast=True, autocast=True)
    _agree(ref, fast, 1e-3, 3e-2, exact_counts=False)


def test_a_full_vocabulary_head_takes_the_same_fast_path():
    model = _drafter("mha", False, "trained", draft_vocab=V)
    _agree(_step(model, "eagle3", False), _step(model, "eagle3", True), 1e-5, 1e-4, True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "attention,method,autocast,ac",
    [
        ("mha", "eagle3", False, "off"),
        ("mha", "eagle3", True, "off"),
        ("mla", "eagle3", False, "off"),
        # EAGLE-3.1 feeds back the normed fp32 state (the norms see another dtype), and the
        # compiled functions run again in backward under activation checkpointing
        ("mha", "eagle3.1", False, "on"),
    ],
)
def test_the_compiled_step_is_the_fast_step(attention, method, autocast, ac):
    """`--fast-path compiled`: the TTT merge, the loss's per-chunk arithmetic, the norms, the
    SwiGLU activation and the rotation through torch.compile (inductor, here its CPU backend)
    compute the fast path's figures and gradients. The chunks of 16 leave a shorter last chunk
    per row, and each TTT step merges another number of diagonal steps: the recompiles are
    covered."""
    from torch._dynamo.utils import counters

    from eyas.drafter import fast_path

    model = _drafter(attention, method == "eagle3.1", "trained")
    fast = _step(model, method, fast=True, ac=ac, autocast=autocast)
    torch._dynamo.reset()
    fast_path.forget_compiled()
    counters.clear()
    compiled = _step(model, method, fast=True, ac=ac, autocast=autocast, mode="compiled")
    rotation = "rotate_pairs" if attention == "mla" else "rotate_half"
    names = {"merge_diagonal", "chunk_stats", "rms_norm", "silu_mul", rotation}
    assert {f.__name__ for f in fast_path.compiled_functions()} == names
    # dynamo compiled each of them, and the merge of each of TTT 4's 1..3 diagonal steps: no
    # eager fallback
    assert counters["frames"]["ok"] >= len(names) + 2
    assert not counters["frames"].get("total", 0) - counters["frames"]["ok"]
    if autocast:  # bf16 products: the compiled kernel's fp32 sums run in another order
        _agree(fast, compiled, 1e-3, 1e-2, exact_counts=False)
    else:
        _agree(fast, compiled, 1e-5, 1e-4, exact_counts=True)


def test_dflash_loss_is_the_same_on_the_fast_path():
    from eyas.drafter.dflash.train import block_loss

    torch.manual_seed(3)
    b, a, bs = 2, 5, 4
    _, supervised, _, teacher = _batch()
    anchors = torch.sort(torch.randint(1, 90, (b, a)), -1).values
    valid = torch.ones(b, a, dtype=torch.bool)
    valid[1, -1] = False
    results = []
    for fast, compiled in ((False, False), (True, False), (True, True)):
        states = torch.randn(b, a, bs, H, generator=torch.Generator().manual_seed(4))
        states.requires_grad_(True)
        for weighting in ("decay", "dpace"):
            loss, stats = block_loss(
                states, teacher, supervised, anchors, valid, 20.0, weighting=weighting,
                chunk=16, fast=fast, compiled=compiled,
            )  # fmt: skip
            (grad,) = torch.autograd.grad(loss, states)
            results.append((float(loss.detach()), resolved(stats), grad))
    for ref, got in zip(results[:2] * 2, results[2:]):  # fast, then compiled, vs the reference
        assert got[0] == pytest.approx(ref[0], rel=1e-5)
        assert float((got[2] - ref[2]).norm() / ref[2].norm()) < 1e-4
        for s, f in zip(ref[1], got[1], strict=True):
            assert (f.positions, f.correct) == (s.positions, s.correct)
            assert f.loss_sum == pytest.approx(s.loss_sum, rel=1e-5)


def test_the_fast_step_never_reads_the_device_from_the_host():
    """Under FakeTensorMode there are no values: a host sync (`float`, `int`, `.item()`,
    `.tolist()`) raises. The whole fast step, forward and backward, runs there; the reference
    step, which reads its figures per TTT step, does not."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    def step(fast: bool) -> None:
        with FakeTensorMode():
            model = _drafter("mha", False, "trained")
            ids, supervised, aux, teacher = _batch(1)
            cfg = types.SimpleNamespace(
                ttt=3, fast_path="on" if fast else "off", activation_checkpointing="on",
                loss_decay=0.8, chunk_len=64,
            )  # fmt: skip
            prep = types.SimpleNamespace(input_ids=ids, supervised=supervised)
            loss, _ = get_method("eagle3").loss(
                model, model, prep, aux=aux, teacher=teacher, normalizer=[50.0] * 3,
                train_cfg=cfg,
            )  # fmt: skip
            loss.backward()

    step(fast=True)
    with pytest.raises(Exception, match=r"[Dd]ata.dependent|item|tolist|local_scalar"):
        step(fast=False)


def test_auto_is_the_fast_path_on_cuda_only():
    cfg = types.SimpleNamespace(fast_path="auto")
    assert fast_path_on(cfg, "cuda") and fast_path_on(cfg, "cuda:1")
    assert not fast_path_on(cfg, "cpu")
    assert fast_path_on(types.SimpleNamespace(fast_path="on"), "cpu")
    assert not fast_path_on(types.SimpleNamespace(fast_path="off"), "cuda")
    compiled = types.SimpleNamespace(fast_path="compiled")
    assert fast_path_on(compiled, "cpu") and loss_compiled(compiled)
    assert not any(loss_compiled(types.SimpleNamespace(fast_path=m)) for m in ("auto", "on"))


def test_training_on_the_fast_path_follows_the_reference_curve(tmp_path, toy_tiny, toy_samples):
    """`eyas train --fast-path on` (and `compiled`) on CPU: the same loss and accuracy curve as
    the reference path, step by step (fp32; Adam amplifies the ~1e-6 gradient differences a
    little)."""
    from eyas.train.loop import run_train
    from train_helpers import toy_train_config

    curves = {}
    for mode in ("off", "on", "compiled"):
        cfg = toy_train_config(
            toy_tiny, tmp_path / mode, data=toy_samples, steps=3, fast_path=mode, ttt=3
        )
        curves[mode] = run_train(cfg, log=lambda s: None).history
    for mode in ("on", "compiled"):
        for ref, fast in zip(curves["off"], curves[mode], strict=True):
            assert fast.loss == pytest.approx(ref.loss, rel=1e-4), mode
            assert fast.per_step_acc == pytest.approx(ref.per_step_acc, abs=1e-3), mode
            assert fast.trained_positions == ref.trained_positions
