"""The budget (`eyas.train.budget`) against the peaks and rates measured on one H200 on
2026-12-04 (bench/results/train_h200_reference.json, eyas's reference path at Kimi-K2.5 width):
memory within 10% for every row (the old estimate ran 15-28% low), the two lengths that did not
fit predicted not to fit, and the throughput from the measured MFU within 10%."""

import json
from pathlib import Path

import pytest

from eyas.drafter.memory import AC_AUTO_TOKENS, AC_OFF_SHARE
from eyas.train.budget import (
    MEASURED_MFU,
    Budget,
    auto_checkpointing_above,
    kimi_table,
    measured_mfu,
    resolved_checkpointing_above,
)

ROOT = Path(__file__).resolve().parents[2]
H200_GB = 139.8  # what torch.cuda reported as the device's capacity in those runs


# What the runs before 2026-12-07 held besides the trainable weights: the drafter's frozen
# embedding in fp32 on one GPU, and the target's embedding on the device beside its head
HELD_BEFORE = {"frozen_bytes_per_param": 4, "target_embedding": True}


def _held(case: dict) -> dict:
    """A measured case's frozen tensors: as its record says, or as they were before it said."""
    held = case.get("held")
    if held is None:
        return HELD_BEFORE
    return {
        "frozen_bytes_per_param": 2 if held["frozen"] == "bfloat16" else 4,
        "target_embedding": held["target_embedding"],
    }


def _rows():
    data = json.loads((ROOT / "bench/results/train_h200_reference.json").read_text())
    return data["kimi_width"]["cases"]


def _budget(case):
    return kimi_table(
        gpus=(1,),
        tokens_per_rank=case["tokens"],
        checkpointing=case["ac"] == "on",
        attention=case["attention"],
        **HELD_BEFORE,
        fast=False,  # what ran on 2026-12-04
    )[0]


@pytest.mark.parametrize("case", _rows(), ids=lambda c: f"{c['attention']}-{c['ac']}-{c['tokens']}")
def test_the_budget_matches_the_measured_h200_peak(case):
    budget = _budget(case)
    # the drafters that ran (their built parameter counts)
    assert budget["trainable_params"] == (
        1_058_828_288 if case["attention"] == "mha" else 764_049_408
    )
    if "oom" in case:
        assert budget["total_gb"] > H200_GB  # it did not fit, and the budget says so
        return
    assert budget["total_gb"] == pytest.approx(case["peak_gb"], rel=0.10)
    static = budget["trainable_gb"] + budget["frozen_gb"] + budget["states_gb"]
    assert static == pytest.approx(case["static_gb"], rel=0.02)


@pytest.mark.parametrize(
    "case",
    [c for c in _rows() if "step_s" in c],
    ids=lambda c: f"{c['attention']}-{c['ac']}-{c['tokens']}",
)
def test_the_throughput_follows_the_measured_mfu(case):
    budget = _budget(case)
    assert budget["tokens_per_s"] == pytest.approx(case["tokens_per_s"], rel=0.10)


def test_the_fast_path_has_its_own_measured_mfu_and_borrows_only_where_unmeasured(monkeypatch):
    mfu, source = measured_mfu("NVIDIA H200", "mla", "fast")
    assert mfu == MEASURED_MFU[("H200", "mla", "fast")] and source == "measured on H200, fast path"
    assert measured_mfu("NVIDIA H200", "mha", "reference")[1] == "measured on H200, reference path"
    assert measured_mfu("NVIDIA A100-SXM4-80GB", "mha", "reference") is None
    assert measured_mfu(None, "mha", "fast") is None
    # a device with only a reference row lends it to the fast path, and says so
    monkeypatch.setitem(MEASURED_MFU, ("H100", "mha", "reference"), 0.3)
    mfu, source = measured_mfu("NVIDIA H100 80GB HBM3", "mha", "fast")
    assert mfu == 0.3 and "not measured" in source


def _gpu_rows():
    """eyas's fast-path cases of Kimi-K2.5's own config measured by bench/bench_train_gpu.py
    (the uncompiled loss: `auto`'s; the compiled one has no MFU row until it is the default)."""
    data = json.loads((ROOT / "bench/results/train_gpu.json").read_text())
    if data.get("tiny"):
        return []
    return [
        c
        for c in data["cases"]
        if c["name"].startswith("eyas kimi")
        and c.get("tokens_per_s")
        and not c.get("loss_compiled")
    ]


@pytest.mark.parametrize(
    "case", _gpu_rows(), ids=lambda c: f"{c['attention']}-{c['tokens']}-{c['fast_path']}"
)
def test_the_fast_path_budget_matches_the_measured_gpu_rows(case):
    """The same drafter (its parameter count), its peak within 10% and its rate within 10% of
    what the fast path measured on the H200."""
    budget = kimi_table(
        gpus=(1,), tokens_per_rank=case["tokens"], checkpointing=case["activation_checkpointing"],
        attention=case["attention"], fast=case["fast_path"], **_held(case),
    )[0]  # fmt: skip
    assert budget["trainable_params"] == case["trainable_parameters"]
    assert budget["total_gb"] == pytest.approx(case["peak_gb"], rel=0.10)
    assert budget["tokens_per_s"] == pytest.approx(case["tokens_per_s"], rel=0.10)


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_auto_checkpointing_keeps_it_off_exactly_where_the_h200_runs_fit(attention):
    """`auto`'s device rule on the 2026-12-04 configurations (reference path, the H200's
    139.8 GiB): for every length measured without AC, the rule turns AC off exactly when the
    measured peak was within `AC_OFF_SHARE` of the device, and every length that ran out of
    memory without AC is over the threshold. The threshold depends on no length: the estimate
    without AC at 4k tokens gives it."""
    capacity = int(H200_GB * 2**30)
    off = Budget(
        **kimi_table(
            gpus=(1,),
            tokens_per_rank=4096,
            checkpointing=False,
            attention=attention,
            fast=False,
            **HELD_BEFORE,
        )[0]
    )
    above = auto_checkpointing_above(off, capacity)
    rows = [c for c in _rows() if c["attention"] == attention and c["ac"] == "off"]
    assert {c["tokens"] for c in rows} == {4096, 16384, 32768}
    for case in rows:
        if "oom" in case:
            assert case["tokens"] > above, (case["tokens"], above)
        else:
            fits = case["peak_gb"] * 1e9 <= AC_OFF_SHARE * capacity
            assert (case["tokens"] <= above) == fits, (case["tokens"], case["peak_gb"], above)


def test_auto_checkpointing_is_resolved_on_a_gpu_only_and_never_below_the_old_rule(monkeypatch):
    from types import SimpleNamespace

    from eyas.drafter import memory

    off = Budget(**kimi_table(gpus=(1,), tokens_per_rank=4096, checkpointing=False)[0])
    auto = SimpleNamespace(activation_checkpointing="auto", activation_checkpointing_above=None)
    monkeypatch.setattr(memory, "device_memory_bytes", lambda device: 80 * 10**9)
    above = resolved_checkpointing_above(auto, lambda: off, "cuda:0")
    assert above == auto_checkpointing_above(off, 80 * 10**9) and above % 1024 == 0
    # the estimate without AC at the threshold fits the share; 1,024 tokens more does not
    grown = off.total_gb * 1e9 + (above - off.tokens_per_rank) * off.bytes_per_token
    assert grown <= AC_OFF_SHARE * 80e9 < grown + 1024 * off.bytes_per_token
    assert resolved_checkpointing_above(auto, lambda: off, "cpu") is None
    given = SimpleNamespace(activation_checkpointing="auto", activation_checkpointing_above=8192)
    assert resolved_checkpointing_above(given, lambda: off, "cuda:0") is None
    on = SimpleNamespace(activation_checkpointing="on", activation_checkpointing_above=None)
    assert resolved_checkpointing_above(on, lambda: off, "cuda:0") is None
    # a device too small for a step without AC at any length keeps the old rule, not less
    assert auto_checkpointing_above(off, 20 * 10**9) == AC_AUTO_TOKENS


RESOLVE_ON_A_RANK = """
import json, os, sys, types
import torch.distributed as dist
from eyas.train import loop

rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
# each rank's GPU gives another threshold (mixed cards, or one with less free memory)
loop.resolved_checkpointing_above = lambda cfg, off, device: 8192 + 4096 * rank
cfg = types.SimpleNamespace(activation_checkpointing="auto", activation_checkpointing_above=None)
lines = []
rank_view = types.SimpleNamespace(
    cfg=cfg, world=2, rank=rank, device="cpu", log=lines.append, _budget=lambda ac: None
)
loop.Trainer._resolve_checkpointing(rank_view)
out = {"above": cfg.activation_checkpointing_above, "logged": lines}
open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w").write(json.dumps(out))
dist.destroy_process_group()
"""


def test_ranks_resolve_one_threshold_the_least(tmp_path):
    """`Trainer._resolve_checkpointing` across two gloo ranks (processes under torchrun, as
    nodes' GPUs would be): each rank's own threshold differs, every rank trains with the least,
    and rank 0 alone logs it."""
    import json
    import subprocess
    import sys

    script = tmp_path / "resolve.py"
    script.write_text(RESOLVE_ON_A_RANK)
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(script), str(tmp_path)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["above"] for r in ranks] == [8192, 8192]
    assert len(ranks[0]["logged"]) == 1 and "8,192 tokens" in ranks[0]["logged"][0]
    assert ranks[1]["logged"] == []
