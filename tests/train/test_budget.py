"""The budget (`eyas.train.budget`) against the peaks and rates measured on one H200 on
2026-12-04 (bench/results/train_h200_reference.json, eyas's reference path at Kimi-K2.5 width):
memory within 10% for every row (the old estimate ran 15-28% low), the two lengths that did not
fit predicted not to fit, and the throughput from the measured MFU within 10%."""

import json
from pathlib import Path

import pytest

from eyas.train.budget import MEASURED_MFU, kimi_table, measured_mfu

ROOT = Path(__file__).resolve().parents[2]
H200_GB = 139.8  # what torch.cuda reported as the device's capacity in those runs


def _rows():
    data = json.loads((ROOT / "bench/results/train_h200_reference.json").read_text())
    return data["kimi_width"]["cases"]


def _budget(case):
    return kimi_table(
        gpus=(1,),
        tokens_per_rank=case["tokens"],
        checkpointing=case["ac"] == "on",
        attention=case["attention"],
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
        attention=case["attention"], fast=case["fast_path"],
    )[0]  # fmt: skip
    assert budget["trainable_params"] == case["trainable_parameters"]
    assert budget["total_gb"] == pytest.approx(case["peak_gb"], rel=0.10)
    assert budget["tokens_per_s"] == pytest.approx(case["tokens_per_s"], rel=0.10)
