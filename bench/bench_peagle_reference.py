"""eyas's P-EAGLE against speculators 0.9.0's `PEagleDraftModel`, step by step (issue 39).

    nice .venv/bin/python bench/bench_peagle_reference.py [--toy-steps 20] [--smol-steps 6]

Both sides start from the same weights (eyas's initial drafter, copied) and train on the same
rows (prompts answered greedily by the target), the same COD samples (eyas's seeded draw;
speculators' own sampler, run from the same seeds, is checked to draw them), AdamW
β=(0.9, 0.95), clip 0.5 and eyas's warmup + cosine learning rate at every step; fp32 on CPU.
The harness is `eyas.testing.peagle_reference` (speculators runs in its own venv). Targets: the
tiny toy (8 depths, speculators' default) and SmolLM2-135M-Instruct (4 depths, kept small).
Reported per step: the KL loss on each side, the largest loss and gradient differences, the
per-depth accuracy; on the toy also each planted defect's first-step differences. Tolerance:
loss 1e-5 relative, gradients 1e-3 of each parameter's largest entry, per-depth counts within
one. Writes bench/results/peagle_reference.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from bench_local_generate import smollm2_dir
from peers import ROOT, speculators_venv

from eyas.testing.peagle_reference import DEFECTS, Setup, run
from eyas.toy.build import build_toy

TOLERANCE = {"rel_loss": 1e-5, "rel_grad": 1e-3, "depth_correct_count": 1}


def summary(name: str, setup: Setup, result: dict, seconds: float) -> dict:
    def acc(steps: list[dict], last: int) -> list[float]:
        tail = steps[-last:]
        return [
            round(sum(s["correct"][i] for s in tail) / max(1, sum(s["total"][i] for s in tail)), 4)
            for i in range(len(tail[0]["total"]))
        ]

    last = max(1, len(result["eyas"]) // 5)
    keep = ("max_abs_loss_diff", "max_rel_loss_diff", "max_abs_grad_diff", "max_rel_grad_diff")
    return {
        "target": name,
        "setup": {k: str(v) if isinstance(v, Path) else v for k, v in vars(setup).items()},
        "mask_token_id": result["mask_token_id"],
        "trainable_parameters_equal": result["trainable_equal"],
        "depth_counts_equal": result["depth_counts_equal"],
        "cod_samples_equal": result["cod_samples_equal"],
        **{k: result[k] for k in keep},
        "max_depth_correct_diff": result["max_depth_correct_diff"],
        "within_tolerance": result["max_rel_loss_diff"] < TOLERANCE["rel_loss"]
        and result["max_rel_grad_diff"] < TOLERANCE["rel_grad"]
        and result["max_depth_correct_diff"] <= TOLERANCE["depth_correct_count"],
        "defects_first_step": {
            name: {k: d[k] for k in keep} for name, d in result["defects"].items()
        },
        "loss_eyas": [round(s["loss"], 6) for s in result["eyas"]],
        "loss_speculators": [round(s["loss"], 6) for s in result["speculators"]],
        f"depth_acc_last_{last}_steps_eyas": acc(result["eyas"], last),
        f"depth_acc_last_{last}_steps_speculators": acc(result["speculators"], last),
        "step_seconds_eyas": round(
            sum(s["seconds"] for s in result["eyas"]) / len(result["eyas"]), 4
        ),
        "step_seconds_speculators": round(
            sum(s["seconds"] for s in result["speculators"]) / len(result["speculators"]), 4
        ),
        "wall_seconds": round(seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-steps", type=int, default=20)
    ap.add_argument("--smol-steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    spec_python = speculators_venv() / "bin" / "python"
    load_before = os.getloadavg()
    runs = {
        "toy_tiny": (
            Setup(
                target=build_toy("tiny"),
                steps=args.toy_steps,
                sequences=16,
                rows=4,
                new_tokens=40,
                depths=8,
                max_anchors=16,
                threads=args.threads,
            ),
            tuple(DEFECTS),
        ),
        "smollm2_135m": (
            Setup(
                target=smollm2_dir(),
                steps=args.smol_steps,
                sequences=8,
                rows=2,
                new_tokens=32,
                depths=4,
                lr=1e-3,
                threads=args.threads,
            ),
            (),
        ),
    }
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (setup, defects) in runs.items():
            t0 = time.perf_counter()
            result = run(setup, Path(tmp) / name, spec_python, defects=defects)
            out.append(summary(name, setup, result, time.perf_counter() - t0))
    print(f"{'target':14} {'steps':>5} {'rel dloss':>10} {'rel dgrad':>10} ok  defects (rel dgrad)")
    for r in out:
        planted = {k: f"{v['max_rel_grad_diff']:.2g}" for k, v in r["defects_first_step"].items()}
        print(
            f"{r['target']:14} {r['setup']['steps']:>5} {r['max_rel_loss_diff']:>10.2e} "
            f"{r['max_rel_grad_diff']:>10.2e} {'yes' if r['within_tolerance'] else 'NO ':3} "
            f"{planted}"
        )
    result = {
        "command": " ".join(["bench/bench_peagle_reference.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "tolerance": TOLERANCE,
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "runs": out,
    }
    path = ROOT / "bench" / "results" / "peagle_reference.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
