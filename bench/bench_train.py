"""Drafter training throughput on CPU at toy scale, TTT 3 and 7 (supervised tokens/s).

    .venv/bin/python bench/bench_train.py [--steps 20]

Trains on reference-completion samples of the toy `tiny` target (built or reused) and prints
supervised tokens/s per configuration; writes JSON. The peer comparison the issue asks for
(speculators 0.9.0 `Eagle3DraftModel` on the same shapes) needs speculators in its own venv
(it pins transformers <= 5.19); it is not run here -- see the closing note in the README.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from eyas.config import TrainConfig
from eyas.render.renderer import Renderer
from eyas.sources import convert_rows
from eyas.toy.build import build_toy
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample
from eyas.train.loop import run_train


def samples(model_dir: Path, path: Path) -> None:
    r = Renderer(model_dir)
    with path.open("w") as f:
        for fam in FAMILIES:
            for conv in convert_rows(family_rows(fam, 30, seed=5), fam.format, fam.name):
                if hasattr(conv, "messages"):
                    f.write(json.dumps(reference_sample(r, conv).to_dict()) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", default="bench/results/train.json")
    args = ap.parse_args()
    model_dir = build_toy("tiny")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "s.jsonl"
        samples(model_dir, data)
        for ttt in (3, 7):
            history = []
            t0 = time.perf_counter()
            run_train(
                TrainConfig(
                    target=model_dir,
                    data=data,
                    out=Path(tmp) / f"t{ttt}",
                    steps=args.steps,
                    ttt=ttt,
                    draft_vocab=512,
                    batch_tokens=6000,
                    checkpoint_every=10_000,
                ),
                log=lambda s: None,
                on_step=history.append,
            )
            wall = time.perf_counter() - t0
            trained = sum(m["trained_positions"] for m in history)
            steady = history[2:] or history
            span = steady[-1]["elapsed_s"] - (history[1]["elapsed_s"] if len(history) > 2 else 0)
            rows.append(
                {
                    "ttt": ttt,
                    "steps": args.steps,
                    "wall_s": round(wall, 2),
                    "supervised_tokens_per_s": round(
                        sum(m["trained_positions"] for m in steady) / max(span, 1e-9), 1
                    ),
                    "supervised_tokens": trained,
                }
            )
    print(f"{'ttt':>5}{'steps':>8}{'wall_s':>10}{'sup tok/s':>12}")
    for r in rows:
        print(f"{r['ttt']:>5}{r['steps']:>8}{r['wall_s']:>10}{r['supervised_tokens_per_s']:>12}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "bench": "train",
                "device": "cpu",
                "runs": rows,
                "peer_comparison": "not run (see README)",
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
