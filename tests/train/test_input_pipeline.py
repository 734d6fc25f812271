"""The training input pipeline: the packed index, the per-epoch batch plan, the prefetching
state reader, and a failed setup leaving the process group."""

import json

import numpy as np
import pytest
import torch
import torch.distributed as dist

from eyas.errors import EyasError
from eyas.store import load_table, select_trainable
from eyas.store.captures import CaptureWriter, _string_array, capture_shards
from eyas.train.data import load_captured_sequences, load_sequences
from eyas.train.loop import run_train
from eyas.train.plan import BatchPlan
from eyas.train.target import CapturedTarget
from train_helpers import toy_train_config


def test_the_packed_index_holds_each_sample_as_the_table_does(toy_samples):
    seqs, report = load_sequences(toy_samples, max_len=1024)
    table = load_table(toy_samples)
    keep, _ = select_trainable(table, "train", frozenset())
    expected = []
    for i in keep:
        prompt, output = table.prompt.row(i).tolist(), table.output.row(i).tolist()
        if len(prompt) + len(output) <= 1024:
            sup = [0] * len(prompt) + table.supervised(i).astype(int).tolist()
            expected.append((table.ids[i], prompt + output, sup))
    assert len(seqs) == report.used == len(expected) > 0
    for k, (sid, ids, sup) in enumerate(expected):
        s = seqs[k]
        assert (s.id, s.ids, s.supervised) == (sid, ids, sup)
    tokens = int(seqs.lengths.sum())
    assert seqs.nbytes() / tokens <= 8, seqs.nbytes() / tokens


def test_the_length_policy_works_on_arrays(toy_samples):
    full, _ = load_sequences(toy_samples, max_len=100_000)
    cap = int(np.median(full.lengths))
    over = int((full.lengths > cap).sum())
    skipped, rep = load_sequences(toy_samples, max_len=cap)
    assert rep.excluded["over_max_len"] == over and len(skipped) == len(full) - over
    cut, rep = load_sequences(toy_samples, max_len=cap, length_policy="truncate")
    assert rep.truncated == over and len(cut) == len(full)
    for k in range(len(full)):
        n = min(len(full[k].ids), cap)
        assert cut[k].ids == full[k].ids[:n] and cut[k].supervised == full[k].supervised[:n]
    assert rep.as_dict()["max_len_seen"] == cap


def _synthetic_capture(path, hidden: int, lengths: list[int], dtype=torch.bfloat16):
    """A capture written by the real writer: random states of 3 aux layers + the last."""
    gen = torch.Generator().manual_seed(0)
    writer = CaptureWriter(path, shard_size=3, dtype=dtype)
    for k, n in enumerate(lengths):
        ids = torch.randint(5, 1000, (n,), generator=gen).tolist()
        mask = [0] * (n // 2) + [1] * (n - n // 2)
        writer.add(f"s{k}", "synthetic", torch.randn(n, 4, hidden, generator=gen), ids, mask)
    writer.flush()
    (path / "manifest.json").write_text(json.dumps({"aux_layers": [1, 2, 3], "excluded": {}}))


def test_the_captured_index_points_at_each_sample_rows(tmp_path):
    lengths = [7, 30, 12, 5, 40, 9, 22]
    _synthetic_capture(tmp_path / "cap", 8, lengths)
    seqs, report, _ = load_captured_sequences(tmp_path / "cap", max_len=25)
    kept = [n for n in lengths if n <= 25]
    assert seqs.lengths.tolist() == kept and report.excluded["over_max_len"] == 2
    cut, report, _ = load_captured_sequences(tmp_path / "cap", 25, "truncate")
    assert cut.lengths.tolist() == [min(n, 25) for n in lengths] and report.truncated == 2
    s = cut[4]  # sample 4 (40 tokens): the second shard's second row, cut to 25
    second = capture_shards(tmp_path / "cap")[1]
    assert (s.id, s.source.shard, s.source.start, s.source.end) == ("s4", second, 5, 30)
    assert s.supervised == [0] * 20 + [1] * 5


def test_the_plan_is_made_per_epoch_and_independent_of_world_size():
    lengths = np.random.default_rng(1).integers(5, 400, size=300)
    plan = BatchPlan(lengths, 2000, seed=3)
    again = BatchPlan(lengths, 2000, seed=3)
    n = plan.epoch_len
    epoch0 = [plan.batch(p).tolist() for p in range(n)]
    assert sorted(i for b in epoch0 for i in b) == list(range(300))  # each once per epoch
    assert all(lengths[b].max() * len(b) <= 2000 or len(b) == 1 for b in epoch0)
    assert [again.batch(p).tolist() for p in range(n, 2 * n)] != epoch0  # a new order
    assert [again.batch(p).tolist() for p in range(n)] == epoch0  # resumable from a position
    for world in (2, 3, 5):
        for p in range(n):
            shares = [plan.share(p, r, world) for r in range(world)]
            assert sorted(np.concatenate(shares).tolist()) == sorted(plan.batch(p).tolist())
            tokens = [int(lengths[s].sum()) for s in shares]
            if all(len(s) for s in shares):  # balanced within one sequence
                assert max(tokens) - min(tokens) <= lengths[plan.batch(p)].max()


def test_an_idle_rank_runs_a_short_filler_not_a_whole_sequence(tmp_path, toy_tiny):
    """One long sequence in a global batch: the other rank trains a few tokens at weight 0."""
    from eyas.train.loop import Trainer

    _synthetic_capture(tmp_path / "cap", 96, [300, 300, 300])
    cfg = toy_train_config(
        toy_tiny, tmp_path / "o", hidden_states=tmp_path / "cap", batch_tokens=400
    )
    trainer = Trainer(cfg, log=lambda s: None)
    trainer.setup()
    trainer.world, trainer.rank = 2, 1
    seqs, weight = trainer._batch_at(0)
    assert weight == 0.0 and len(seqs) == 1 and len(seqs[0].ids) == 16
    assert not any(seqs[0].supervised)
    trainer.rank = 0
    seqs, weight = trainer._batch_at(0)
    assert weight == 1.0 and [len(s.ids) for s in seqs] == [300]


def test_prefetched_states_equal_a_direct_read_and_keep_their_dtype(tmp_path, toy_tiny):
    _synthetic_capture(tmp_path / "cap", 96, [10, 20, 15, 8])
    seqs, _, manifest = load_captured_sequences(tmp_path / "cap", 1024)
    target = CapturedTarget(toy_tiny, manifest)
    batch = [seqs[1], seqs[3]]
    raw = target._read(batch)
    assert raw.dtype == torch.bfloat16 and raw.shape == (2, 20, 4, 96)
    assert torch.equal(raw[1, 8:], torch.zeros(12, 4, 96, dtype=torch.bfloat16))
    ids = torch.zeros(2, 20, dtype=torch.long)
    direct = target(ids, batch)
    target.prefetch(batch)
    assert len(target._pending) == 1
    ahead = target(ids, batch)
    assert not target._pending  # the prefetched read was the one used
    assert all(torch.equal(a, b) for a, b in zip(direct, ahead))
    assert torch.equal(direct[0][0, :, :96], raw[0, :, 0].float())


def test_a_failed_setup_leaves_the_process_group(tmp_path, toy_tiny, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # as under torchrun; the group is made here
    monkeypatch.setenv("RANK", "0")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        with pytest.raises(EyasError):
            run_train(toy_train_config(toy_tiny, tmp_path / "o", data=empty), log=lambda s: None)
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_the_budget_scales_as_its_formula_says():
    from eyas.drafter.memory import ActivationShape
    from eyas.train.budget import estimate, kimi_table

    shape = ActivationShape.mha(64, 64, 4, 16, 128)
    kw = dict(
        shape=shape,
        n_aux=3,
        ttt=3,
        trainable_params=1700,
        frozen_params=4000,
        frozen_bytes=8000,
        vocab=2000,
        draft_vocab=500,
        head_trained=True,
        tokens_per_rank=100,
        device_name="NVIDIA H200",
    )
    one = estimate(world=1, fsdp=True, **kw)
    four = estimate(world=4, fsdp=True, **kw)
    ddp = estimate(world=4, fsdp=False, **kw)
    # 12 B per trainable parameter between steps, 6 B more in the step (gradient, bf16 copy)
    assert one.trainable_gb == pytest.approx(12 * 1700 / 1e9, abs=0.01)
    assert one.step_gb == pytest.approx(6 * 1700 / 1e9, abs=0.01)
    assert four.trainable_gb == pytest.approx(one.trainable_gb / 4, abs=0.01)
    assert ddp.trainable_gb == one.trainable_gb and ddp.frozen_gb == four.frozen_gb
    assert four.tokens_per_s == pytest.approx(4 * one.tokens_per_s, rel=1e-3)
    assert one.gflop_per_token == round(one.flops_per_step / 100 / 1e9, 1)
    fp32 = estimate(world=1, fsdp=True, dtype_bytes=4, **kw)
    assert fp32.step_gb == pytest.approx(4 * 1700 / 1e9, abs=0.01)  # no bf16 copies
    rows = kimi_table()
    assert [r["world"] for r in rows] == [1, 8, 16]
    # fc 154M, the MHA attention 411M, MLP 264M, draft head 229M and the four norms: the drafter
    # `eyas train` builds (tests/train/test_budget.py checks the count against the built one)
    assert rows[0]["trainable_params"] == 1_058_828_288
    frozen = kimi_table(gpus=(1,), head_trained=False)[0]
    assert frozen["trainable_params"] == 1_058_828_288 - 32000 * 7168


def test_the_budgets_activations_are_the_drafter_memory_count():
    """One owner for the arithmetic: the budget's activations are `activation_elements_per_token`
    times the element size, the tokens and the path's calibration factor, so they move with
    TTT, tokens, AC, precision and the attention's shape exactly as that count does."""
    from eyas.drafter.memory import activation_elements_per_token
    from eyas.train.budget import ACTIVATION_FACTOR, KIMI_MHA, KIMI_MLA, kimi_table

    def act(**kw):
        return kimi_table(gpus=(8,), **kw)[0]["activations_gb"]

    for attention, shape in (("mha", KIMI_MHA), ("mla", KIMI_MLA)):
        for ac in (False, True):
            per_token = 2 * activation_elements_per_token(shape, 7, ac)  # bf16, TTT 7
            factor = ACTIVATION_FACTOR[("fast", attention, ac)]
            got = act(attention=attention, checkpointing=ac)
            assert got == pytest.approx(factor * per_token * 16_384 / 1e9, abs=0.01)
        assert act(attention=attention, tokens_per_rank=32_768) == pytest.approx(
            2 * act(attention=attention), abs=0.02
        )
        # AC keeps a small share of what runs without it (the traced fast path: under 40%)
        assert act(attention=attention, checkpointing=True) < act(attention=attention) / 2.5
    # MLA keeps wider keys ([nope ; rope] = 192) and pads earlier steps' k, v: more activations
    assert act(attention="mla") > act(attention="mha")
    mla, mha = kimi_table(gpus=(8,), attention="mla")[0], kimi_table(gpus=(8,))[0]
    assert mla["attention"] == "mla" and mha["attention"] == "mha"
    assert mla["trainable_params"] < mha["trainable_params"]  # MLA's low-rank projections


def test_the_budgets_attention_weights_are_the_built_layers():
    import types

    from eyas.drafter.eagle3.model import Attention
    from eyas.drafter.memory import ActivationShape
    from eyas.drafter.mla import MLAAttention
    from eyas.train.budget import attention_params

    cfg = types.SimpleNamespace(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=16,
        rope_theta=10000.0,
        rope_scaling=None,
        rms_norm_eps=1e-6,
        q_lora_rank=24,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=12,
    )
    mla = ActivationShape(64, 64, 4, 24, 12, 128, 24, 16, 8)
    built = sum(p.numel() for p in MLAAttention(cfg, 128).parameters())
    assert attention_params(mla) == built
    mha = ActivationShape.mha(64, 64, 4, 16, 128)
    assert attention_params(mha) == sum(p.numel() for p in Attention(cfg).parameters())


def test_train_says_what_it_will_need_before_it_runs(tmp_path, toy_tiny, toy_samples):
    from eyas.train.loop import Trainer

    lines = []
    trainer = Trainer(toy_train_config(toy_tiny, tmp_path / "o", data=toy_samples), lines.append)
    trainer.setup()
    line = next(x for x in lines if x.startswith("memory estimate per GPU"))
    assert "weights and optimizer" in line and "3,000 tokens" in line
    # the activations printed are the drafter's own count at the run's TTT and precision
    from eyas.drafter.memory import ActivationShape, activation_elements_per_token
    from eyas.train.budget import ACTIVATION_FACTOR

    budget = trainer._printed_budget()
    shape = ActivationShape.of_config(trainer.raw_model.config)
    assert shape.hidden == trainer.raw_model.config.hidden_size
    size = 2 if trainer.bf16 else 4
    on = trainer.cfg.activation_checkpointing == "on"
    count = activation_elements_per_token(shape, trainer.cfg.ttt, on)
    factor = ACTIVATION_FACTOR[("reference", "mha", on)]  # CPU: the reference path
    assert budget.activations_gb == round(factor * size * count * 3000 / 1e9, 2) > 0
    assert budget.activation_checkpointing == on
    # off a GPU `auto` keeps its fixed threshold: nothing resolved, nothing said about it
    assert trainer.cfg.activation_checkpointing_above is None
    assert not any(x.startswith("activation checkpointing (auto)") for x in lines)


def test_an_id_two_jobs_captured_is_packed_once(tmp_path):
    cap = tmp_path / "cap"
    for names in (["a", "b"], ["b", "c"]):
        writer = CaptureWriter(cap, shard_size=10, dtype=torch.bfloat16)
        for name in names:
            writer.add(name, "d", torch.zeros(4, 4, 8), [5, 6, 7, 8], [0, 1, 1, 1])
        writer.flush()
    (cap / "manifest.json").write_text(json.dumps({"aux_layers": [1, 2, 3], "excluded": {}}))
    seqs, report, _ = load_captured_sequences(cap, 1024)
    assert sorted(seqs.sample_ids()) == ["a", "b", "c"] and report.loaded == 3
    first = capture_shards(cap)[0]  # both shards hold "b": the first in part-name order wins
    assert seqs[seqs.sample_ids().index("b")].source.shard == first
    assert seqs.tokens.tolist() == [5, 6, 7, 8] * 3


def test_sample_ids_are_read_as_arrays_equal_to_the_json_lists(tmp_path):
    cap = tmp_path / "cap"
    shards = (  # plain ids (numpy's parse), then ids with escapes and non-ASCII (JSON's)
        [("a", "d1"), ("bbbbbbbbbbbb", "d2"), ("c,d", "d1")],
        [('q"x', "d2"), ("ünï", "d3"), ("back\\slash", "d1")],
    )
    writer = CaptureWriter(cap, shard_size=3, dtype=torch.bfloat16)  # one job: shards in order
    for rows in shards:
        for name, ds in rows:
            writer.add(name, ds, torch.zeros(3, 4, 8), [5, 6, 7], [0, 1, 1])
    writer.flush()
    (cap / "manifest.json").write_text(json.dumps({"aux_layers": [1, 2, 3], "excluded": {}}))
    seqs, report, _ = load_captured_sequences(cap, 1024)
    assert len(capture_shards(cap)) == 2
    assert seqs.sample_ids() == [n for rows in shards for n, _ in rows] and report.loaded == 6
    assert [s.dataset for s in seqs] == [d for rows in shards for _, d in rows]
    path = capture_shards(cap)[0]
    spaced = {"ids": ' [ "x" ,\n"yy"\t] ', "bad": '["x", 3]', "empty": "[]"}
    assert _string_array(path, spaced, "ids").tolist() == [b"x", b"yy"]
    assert _string_array(path, spaced, "empty").tolist() == []
    with pytest.raises(EyasError, match="not a list of strings"):
        _string_array(path, spaced, "bad")
