"""bench/bench_train_gpu.py at toy width on CPU (`--tiny`), so the GPU benchmark cannot rot
between the sessions that have a GPU: the path check, eyas's cases on both paths and
speculators' case (in its own venv) all run, every case's losses fall, and at equal settings
eyas with its head frozen trains exactly as many parameters as speculators as it ships; `--fill`
keeps measured cases but reruns an eyas case measured under another definition (what it held,
how it chose activation checkpointing)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _definition() -> str:
    """The benchmark's EYAS_DEFINITION (what an eyas case runs now)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_train_gpu", ROOT / "bench/bench_train_gpu.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EYAS_DEFINITION


@pytest.mark.slow  # five processes, each importing torch and eyas or speculators
def test_the_gpu_benchmark_runs_at_toy_width(tmp_path, speculators_python):
    out = tmp_path / "train_gpu.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_train_gpu.py"), "--tiny", "--out", str(out),
         "--spec-python", str(speculators_python), "--warmup", "1", "--steps", "2",
         "--case-timeout", "600", "--budget-s", "3600", "--profile", str(tmp_path / "prof"),
         "--profile-tokens", "128"],
        check=True, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    data = json.loads(out.read_text())
    assert data["tiny"] and set(data["path_check"]) == {"gqa", "mla"}
    for drafter in data["path_check"].values():
        assert drafter["agree"], drafter
        # both bf16 paths against the fp32 reference: the fast one no further from it
        assert drafter["fast_vs_fp32"] <= 1.25 * drafter["reference_vs_fp32"], drafter
        assert drafter["compiled_agree"], drafter  # --fast-path compiled, by the same rule
    # one profiled step per eyas case at --profile-tokens, an operator table each
    tables = sorted(p.name for p in (tmp_path / "prof").iterdir())
    assert len(tables) == 4 and all(
        "aten::mm" in (tmp_path / "prof" / t).read_text() for t in tables
    )
    cases = {(c["name"], c["tokens"]): c for c in data["cases"]}
    assert len(cases) == 5
    for case in cases.values():
        assert "error" not in case and case["tokens_per_s"] > 0, case
        assert case["wall_s"] >= sum(case.get("step_seconds", [])), case
        assert case["losses_fall"], case
    eyas = cases[("eyas llama frozen", 128)]
    assert eyas["trainable_parameters"] == cases[("speculators", 128)]["trainable_parameters"]
    assert eyas["fast_path"] and not cases[("eyas kimi mha reference path", 128)]["fast_path"]
    assert eyas["budget"]["gflop_per_token"] > 0
    compiled = cases[("eyas kimi mla compiled", 128)]
    assert compiled["loss_compiled"] and not cases[("eyas kimi mla", 128)]["loss_compiled"]
    assert (
        compiled["fast_path"]
        and compiled["trainable_parameters"]
        == (cases[("eyas kimi mla", 128)]["trainable_parameters"])
    )
    # eyas's cases run what `eyas train` runs: auto activation checkpointing as it resolves it
    # (off a GPU, nothing resolved), the frozen tensors in bf16, the target's embedding off
    # the device
    for case in (c for c in data["cases"] if c["side"] == "eyas"):
        assert case["definition"] == _definition()
        assert case["held"] == {"frozen": "bfloat16", "target_embedding": False}
    assert eyas["activation_checkpointing_above"] is None
    # --fill keeps an earlier run's measured cases and runs only the rest: here, the one eyas
    # case made to look measured under no definition (before 2026-12-07)
    earlier = json.loads(out.read_text())
    old = next(c for c in earlier["cases"] if c["name"] == "eyas llama frozen")
    del old["definition"]
    out.write_text(json.dumps(earlier))
    again = tmp_path / "again.json"
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_train_gpu.py"), "--tiny", "--out", str(again),
         "--fill", str(out), "--no-check"],
        check=True, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    refilled = {(c["name"], c["tokens"]): c for c in json.loads(again.read_text())["cases"]}
    assert json.loads(again.read_text())["path_check"] == {"skipped": "--no-check"}
    assert refilled.keys() == cases.keys()
    rerun = refilled.pop(("eyas llama frozen", 128))
    assert (
        "measured" not in rerun
        and rerun["definition"] == _definition()
        and rerun["tokens_per_s"] > 0
    )
    for key, case in refilled.items():
        assert case["measured"] == data["date"]
        assert {k: v for k, v in case.items() if k != "measured"} == cases[key]
