"""The activation count (`eyas.drafter.memory`): how it moves with TTT, activation
checkpointing, precision and the attention's shape, and that it tracks what autograd keeps for a
tiny drafter of each attention."""

import itertools

import pytest
import torch

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.drafter.memory import (
    ActivationShape,
    activation_bytes_per_token,
    activation_elements_per_token,
)

MHA = ActivationShape.mha(7168, 7168, 64, 128, 12288)
# Kimi-K2.5's own attention dims: q_lora 1536, kv_lora 512, nope 128, rope 64, v 128
MLA = ActivationShape(7168, 7168, 64, 192, 128, 12288, 1536, 512, 64)


@pytest.mark.parametrize("shape", [MHA, MLA], ids=["mha", "mla"])
def test_the_count_grows_with_ttt_and_falls_with_checkpointing(shape):
    count = activation_elements_per_token
    for ac in (False, True):
        steps = [count(shape, t, ac) for t in range(1, 9)]
        assert all(b > a for a, b in itertools.pairwise(steps))
    # one step: AC keeps the same step and recomputes it, so it saves nothing
    assert count(shape, 1, True) == count(shape, 1, False)
    assert all(count(shape, t, True) < count(shape, t, False) for t in (2, 3))
    assert count(shape, 7, True) < count(shape, 7, False) / 3
    # without AC each added step costs at least what AC keeps per step plus the layer's inside
    kept_step = count(shape, 3, True) - count(shape, 2, True)
    assert count(shape, 3, False) - count(shape, 2, False) > 3 * kept_step


def test_precision_is_the_element_size():
    fp32 = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, False, dtype_bytes=4)
    bf16 = activation_bytes_per_token(7168, 7168, 64, 128, 12288, 7, False, dtype_bytes=2)
    assert fp32 == 2 * bf16 == 4 * activation_elements_per_token(MHA, 7, False)


def test_mla_and_mha_differ_as_their_shapes_say():
    count = activation_elements_per_token
    h = 64
    # per step with AC: MHA keeps k and v (h x 128 each); MLA keeps k (h x [nope 128 ; rope 64])
    # and kv_b_proj's [nope ; v] output (h x 256) that v is a view of; its pads of earlier
    # steps' k, v to 192 wide add 2 h 192 per step to the recomputed step
    mha_step = count(MHA, 3, True) - count(MHA, 2, True)
    mla_step = count(MLA, 3, True) - count(MLA, 2, True)
    assert mla_step - mha_step == h * (192 + 256) - 2 * h * 128 + 2 * h * 192
    # one width for q, k and v (rope 0, v = qk): no pads, so no term quadratic in TTT
    even = ActivationShape(7168, 7168, 64, 128, 128, 12288, 1536, 512, 0)
    d = [count(even, t, False) for t in (1, 2, 3)]
    assert d[2] - d[1] == d[1] - d[0]
    u = [count(MLA, t, False) for t in (1, 2, 3)]
    assert (u[2] - u[1]) - (u[1] - u[0]) == 2 * h * 192


def _tiny(mla: bool) -> Eagle3Drafter:
    kw = dict(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        vocab_size=50,
        draft_vocab_size=50,
        target_hidden_size=64,
        aux_layer_ids=[1, 2, 3],
    )
    if mla:
        kw |= dict(
            attention="mla",
            q_lora_rank=24,
            kv_lora_rank=16,
            qk_nope_head_dim=16,
            qk_rope_head_dim=8,
            v_head_dim=16,
        )
    torch.manual_seed(0)
    return Eagle3Drafter(Eagle3Config(**kw)).train()


def _saved_per_token(model: Eagle3Drafter, ttt: int, t: int = 128) -> float:
    """Elements (fp32) of the distinct non-parameter storages autograd saves in forward."""
    weights = {x.untyped_storage().data_ptr() for x in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(x):
        if x.untyped_storage().data_ptr() not in weights:
            seen[x.untyped_storage().data_ptr()] = x.untyped_storage().nbytes()
        return x

    ids, aux = torch.randint(0, 50, (1, t)), torch.randn(1, t, 3 * 64)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        model(ids, aux, ttt)
    return sum(seen.values()) / 4 / t


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_the_count_per_step_tracks_what_autograd_saves(mla):
    """A step's increment, counted and measured (fp32, no AC). The count's per step includes
    the loss's normalised and teacher states (2 x 64), which this forward without a loss does
    not save."""
    model = _tiny(mla)
    shape = ActivationShape.of_config(model.config)
    assert shape.mla == mla
    for t in (2, 3):
        counted = (
            activation_elements_per_token(shape, t + 1, False)
            - activation_elements_per_token(shape, t, False)
            - 2 * 64
        )
        measured = _saved_per_token(model, t + 1) - _saved_per_token(model, t)
        assert measured == pytest.approx(counted, rel=0.15)


def test_default_max_len_counts_the_drafter_the_run_builds(kimi_toy, toy_tiny, monkeypatch):
    """On an MLA target the EAGLE-3 drafter is MLA by default, and `--max-len`'s default counts
    that shape; `--attention mha`, DFlash and P-EAGLE (EAGLE-3's MHA layer on an MLA target)
    count the MHA layer: each method's `attentions()` says which."""
    import types

    from eyas.drafter import memory
    from eyas.drafter.registry import get_method
    from eyas.hf_models import target_model

    def cfg(**kw):
        base = dict(
            num_attention_heads=None,
            head_dim=None,
            intermediate_size=None,
            attention=None,
            method="eagle3",
            ttt=7,
            activation_checkpointing="auto",
        )
        return types.SimpleNamespace(**{**base, **kw})

    def shape(target, **kw):
        c = cfg(**kw)
        return memory.target_activation_shape(target, c, get_method(c.method).attentions())

    kimi = target_model(kimi_toy)
    mla = shape(kimi)
    assert mla.mla and mla.kv_lora_rank == kimi.text["kv_lora_rank"]
    assert mla.qk_head_dim == kimi.text["qk_nope_head_dim"] + kimi.text["qk_rope_head_dim"]
    assert shape(kimi, method="eagle3.1").mla
    assert not shape(kimi, attention="mha").mla
    for method in ("dflash", "dflash2", "peagle"):
        assert not shape(kimi, method=method).mla, method
    assert not shape(target_model(toy_tiny)).mla
    # room for exactly 2^14 tokens of the MLA drafter's activations (fp32 on CPU): 16,384; the
    # MHA drafter's count is another, so the same room gives it another length
    per_token = 4 * activation_elements_per_token(mla, 7, True)
    room = int(2**14 * per_token / memory.DEVICE_SHARE) + 1
    monkeypatch.setattr(memory, "device_memory_bytes", lambda device: room)
    monkeypatch.setattr(type(kimi), "context_length", property(lambda self: 10**6))
    eagle3 = get_method("eagle3").attentions()
    assert memory.default_max_len(kimi, cfg(), "cpu", eagle3) == 2**14
    assert memory.default_max_len(kimi, cfg(attention="mha"), "cpu", eagle3) != 2**14
    assert memory.default_max_len(kimi, cfg(method="peagle"), "cpu", ("mha",)) != 2**14


@pytest.mark.parametrize("method", ["eagle3", "dflash", "peagle"])
def test_the_budget_applies_the_fast_paths_rows_to_the_method_they_were_measured_on(
    tmp_path, toy_tiny, method
):
    """The fast path's activation and MFU rows were measured on EAGLE-3's step (FlexAttention
    TTT attention, the fused loss); DFlash and P-EAGLE have no such step on CUDA, so their
    estimate on the fast path is the reference path's."""
    from engine_parity import Shape, build_drafter

    from eyas.drafter.registry import get_method
    from eyas.hf_models import target_model
    from eyas.train.budget import trainer_budget

    model = build_drafter(Shape("toy", toy_tiny), method, tmp_path)
    target = target_model(toy_tiny)
    head = torch.zeros(target.vocab_size, target.hidden_size)  # the target's, for its size
    budgets = {
        fast: trainer_budget(
            model, head, 3, 3, 4096, 1, False, "cpu", fast=fast, checkpointing=True
        )
        for fast in (False, True)
    }
    measured = get_method(method).fast_path_measured
    assert measured == (method == "eagle3")
    assert (budgets[True].activations_gb != budgets[False].activations_gb) == measured
