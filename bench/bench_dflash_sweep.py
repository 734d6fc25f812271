"""What makes DFlash learn on a small budget: one setting changed at a time from a base.

    nice .venv/bin/python bench/bench_dflash_sweep.py [--steps 80] [--only base,layers3]

Target: the tiny toy, its own generated training data and held-out prompts (`bench_methods.
_data`, the toy's template, regenerated in process). Every variant trains `--steps` optimiser
steps on the same batches (same seed and data order, AdamW, `--batch-tokens`), then decodes
the held-out prompts offline, lossless, with blocks of its own size (K = block - 1 drafted
tokens per verify step): acceptance length (bonus included) and its per-position
acceptance; plus the training per-slot accuracy over the last fifth of the steps and the
seconds per step (one process, variants one after another on a shared machine: compare
ratios; the load average is recorded). The fused target layers are the method's default at
run time unless a variant names them; each row records the ones it trained with. Writes
bench/results/dflash_sweep.json after every variant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from bench_methods import _data, _offline

from eyas.evaluate.prompts import load_prompts
from eyas.train.config import TrainConfig
from eyas.train.loop import run_train

BASE = {
    "draft_layers": 1,
    "dflash": {"block_size": 4, "max_anchors": 512, "weighting": "decay", "gamma": 4.0},
    "lr": 3e-3,
}
VARIANTS = {
    "base": {},
    "layers2": {"draft_layers": 2},
    "layers3": {"draft_layers": 3},
    "block8": {"dflash": {"block_size": 8}},
    "anchors16": {"dflash": {"max_anchors": 16}},
    "anchors64": {"dflash": {"max_anchors": 64}},
    "dpace": {"dflash": {"weighting": "dpace"}},
    "gamma1": {"dflash": {"gamma": 1.0}},
    "lr1e-3": {"lr": 1e-3},
    "lr1e-2": {"lr": 1e-2},
    "aux3": {"aux_layers": [1, 2, 3]},  # EAGLE-3's three fused layers instead of z-lab's one
    "aux3_layers2": {"aux_layers": [1, 2, 3], "draft_layers": 2},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("runs/bench_dflash_sweep"))
    ap.add_argument("--rows", type=int, default=8, help="rows per toy dataset")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--limit", type=int, default=2, help="held-out prompts per dataset")
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    ap.add_argument("--json", type=Path, default=Path("bench/results/dflash_sweep.json"))
    args = ap.parse_args()
    from eyas.toy.build import build_toy

    target = build_toy("tiny")
    load_before = os.getloadavg()
    data, eval_dir = _data(target, args.out / "data", args.rows, args.max_new_tokens)
    prompts = load_prompts(eval_dir, args.limit)
    names = args.only.split(",") if args.only else list(VARIANTS)
    rows: dict[str, dict] = {}
    for name in names:
        variant = VARIANTS[name]
        settings = {**BASE, **variant, "dflash": {**BASE["dflash"], **variant.get("dflash", {})}}
        cfg = TrainConfig(
            target=target,
            data=data,
            out=args.out / f"{name}-{args.steps}x{args.batch_tokens}",
            method="dflash",
            steps=args.steps,
            max_len=2048,
            batch_tokens=args.batch_tokens,
            warmup_steps=max(1, args.steps // 10),
            checkpoint_every=10**6,
            **settings,
        )
        start = time.perf_counter()
        trained = run_train(cfg, log=lambda s: None)
        drafter, history = trained.drafter, [m.to_dict() for m in trained.history]
        train_s = time.perf_counter() - start
        tail = history[-max(1, len(history) // 5) :]
        slots = len(tail[0]["per_step_acc"])
        offline = _offline(
            target, drafter, prompts, settings["dflash"]["block_size"] - 1, args.max_new_tokens
        )
        saved = json.loads((drafter / "drafter_config.json").read_text())
        rows[name] = {
            "settings": settings,
            "fused_layers": saved["aux_layer_ids"],
            "acceptance_length": offline["acceptance_length"],
            "per_position": offline["per_position"],
            "lossless": offline["lossless"],
            "train_slot_acc": [
                round(sum(h["per_step_acc"][i] for h in tail) / len(tail), 4) for i in range(slots)
            ],
            "train_loss_last": round(sum(h["loss"] for h in tail) / len(tail), 4),
            "train_s_per_step": round(train_s / args.steps, 3),
            "drafter_ms_per_verify_step": offline["drafter_ms_per_verify_step"],
        }
        print(
            f"{name:10} AL {offline['acceptance_length']:.3f} (K={settings['dflash']['block_size'] - 1}) "
            f"slot acc {rows[name]['train_slot_acc']} s/step {rows[name]['train_s_per_step']}",
            flush=True,
        )
        args.json.parent.mkdir(parents=True, exist_ok=True)
        # variants run in separate invocations (`--only`) add to the file: re-read it first
        if args.json.exists():
            earlier = json.loads(args.json.read_text())
            if earlier.get("base") == BASE:
                rows = {**earlier["results"], **rows}
        args.json.write_text(
            json.dumps(
                {
                    "command": " ".join(["bench/bench_dflash_sweep.py", *sys.argv[1:]]),
                    "settings": {k: str(v) for k, v in vars(args).items()},
                    "base": BASE,
                    "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(),
                    "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg(),
                    "metric": "acceptance_length = tokens per target verify step, bonus "
                    "included, K = block_size - 1, held-out prompts, lossless",
                    "results": rows,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
