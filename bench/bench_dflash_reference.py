"""eyas's DFlash (or DFlash2) against speculators 0.9.0's `DFlashDraftModel`
(`DFlash2DraftModel`), step by step (issues 32, 39).

    nice .venv/bin/python bench/bench_dflash_reference.py [--toy-steps 30] [--smol-steps 10]
    nice .venv/bin/python bench/bench_dflash_reference.py --method dflash2

Both sides start from the same weights (eyas's initial drafter, copied) and train on the same
rows (prompts answered greedily by the target), the same anchors (eyas's seeded draw), AdamW
β=(0.9, 0.95), clip 0.5 and eyas's warmup + cosine learning rate at every step; fp32 on CPU.
The harness is `eyas.testing.dflash_reference` (speculators runs in its own venv). Targets:
the tiny toy (2 draft layers, block 8) and SmolLM2-135M-Instruct (1 draft layer, block 8,
kept small). Reported per step: the KL loss on each side, the per-slot accuracy, and the
largest relative loss difference; tolerance 1e-4 relative, per-slot counts within one
(DFlash2: the teacher-forced selector's correct count over the slots within two); the first
step's gradients, tensor by tensor (largest difference over the tensor's largest gradient).
DFlash2 also trains copies of eyas's model with a defect planted (on the toy) (`DFLASH2_MUTANTS` of
tests/drafter/test_dflash_reference.py: a wrong mask, a dropped norm, a convolution crossing
blocks) against the same speculators run, and reports how far each lands.
Writes bench/results/dflash_reference.json (DFlash2: dflash2_reference.json).
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

from eyas.testing.dflash_reference import Setup, run
from eyas.toy.build import build_toy

TOLERANCE = 1e-4


def summary(name: str, setup: Setup, result: dict, seconds: float) -> dict:
    slack = 1 if setup.method == "dflash" else 2  # DFlash2: one count over the slots

    def acc(steps: list[dict], last: int) -> list[float]:
        tail = steps[-last:]
        if setup.method != "dflash":  # the selector's, over every slot
            return [
                round(sum(s["correct"][0] for s in tail) / sum(sum(s["total"]) for s in tail), 4)
            ]
        return [
            round(sum(s["correct"][i] for s in tail) / max(1, sum(s["total"][i] for s in tail)), 4)
            for i in range(len(tail[0]["total"]))
        ]

    last = max(1, len(result["eyas"]) // 5)
    return {
        "target": name,
        "setup": {k: str(v) if isinstance(v, Path) else v for k, v in vars(setup).items()},
        "mask_token_id": result["mask_token_id"],
        "aux_layers": result["aux_layers"],
        "trainable_parameters_equal": result["trainable_equal"],
        "slot_counts_equal": result["slot_counts_equal"],
        "max_rel_loss_diff": result["max_rel_loss_diff"],
        "max_abs_loss_diff": result["max_abs_loss_diff"],
        "first_step_max_grad_abs_diff": result["max_grad_abs_diff"],
        "first_step_max_grad_rel_diff": result["max_grad_rel_diff"],
        "max_slot_acc_diff": result["max_slot_acc_diff"],
        "within_tolerance": result["max_rel_loss_diff"] < TOLERANCE
        and result["max_grad_rel_diff"] < TOLERANCE
        and all(
            abs(a - b) <= slack
            for x, y in zip(result["eyas"], result["speculators"])
            for a, b in zip(x["correct"], y["correct"])
        ),
        "loss_eyas": [round(s["loss"], 6) for s in result["eyas"]],
        "loss_speculators": [round(s["loss"], 6) for s in result["speculators"]],
        f"slot_acc_last_{last}_steps_eyas": acc(result["eyas"], last),
        f"slot_acc_last_{last}_steps_speculators": acc(result["speculators"], last),
        "step_seconds_eyas": round(
            sum(s["seconds"] for s in result["eyas"]) / len(result["eyas"]), 4
        ),
        "step_seconds_speculators": round(
            sum(s["seconds"] for s in result["speculators"]) / len(result["speculators"]), 4
        ),
        "planted_defects": {
            name: {
                "max_rel_loss_diff": m["max_rel_loss_diff"],
                "first_step_max_grad_rel_diff": m["max_grad_rel_diff"],
            }
            for name, m in result["mutants"].items()
        },
        "wall_seconds": round(seconds, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toy-steps", type=int, default=30)
    ap.add_argument("--smol-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--method", choices=["dflash", "dflash2"], default="dflash")
    args = ap.parse_args()
    mutants = {}
    if args.method == "dflash2":
        sys.path.insert(0, str(ROOT / "tests" / "drafter"))
        from test_dflash_reference import DFLASH2_MUTANTS as mutants
    spec_python = speculators_venv() / "bin" / "python"
    load_before = os.getloadavg()
    runs = {
        "toy_tiny": Setup(
            target=build_toy("tiny"),
            steps=args.toy_steps,
            sequences=16,
            rows=4,
            new_tokens=40,
            draft_layers=2,
            block_size=8,
            max_anchors=8,
            threads=args.threads,
            method=args.method,
        ),
        "smollm2_135m": Setup(
            target=smollm2_dir(),
            steps=args.smol_steps,
            sequences=8,
            rows=2,
            new_tokens=32,
            draft_layers=1,
            block_size=8,
            max_anchors=8,
            lr=1e-3,
            threads=args.threads,
            method=args.method,
        ),
    }
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, setup in runs.items():
            t0 = time.perf_counter()
            # the planted defects on the toy only: each is another eyas training run
            planted = mutants if name == "toy_tiny" else None
            result = run(setup, Path(tmp) / name, spec_python, mutants=planted)
            out.append(summary(name, setup, result, time.perf_counter() - t0))
    print(
        f"{'target':14} {'steps':>5} {'max rel dloss':>14} {'grad rel diff':>14} "
        f"{'slot acc diff':>14} ok  slot acc (eyas | speculators)"
    )
    for r in out:
        keys = [k for k in r if k.startswith("slot_acc_last")]
        print(
            f"{r['target']:14} {r['setup']['steps']:>5} {r['max_rel_loss_diff']:>14.2e} "
            f"{r['first_step_max_grad_rel_diff']:>14.2e} "
            f"{r['max_slot_acc_diff']:>14.3f} {'yes' if r['within_tolerance'] else 'NO ':3} "
            f"{r[keys[0]]} | {r[keys[1]]}"
        )
        for name, m in r["planted_defects"].items():
            print(
                f"  planted {name:22} max rel dloss {m['max_rel_loss_diff']:.2e}, "
                f"grad rel diff {m['first_step_max_grad_rel_diff']:.2e}"
            )
    result = {
        "command": " ".join(["bench/bench_dflash_reference.py", *sys.argv[1:]]),
        "method": args.method,
        "tolerance": {
            "rel_loss": TOLERANCE,
            "rel_grad": TOLERANCE,
            "slot_correct_count": 1 if args.method == "dflash" else 2,
        },
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "runs": out,
    }
    name = "dflash_reference" if args.method == "dflash" else "dflash2_reference"
    path = ROOT / "bench" / "results" / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
