"""Acceptance length of the quickstart drafter at K = 3, 5, 7 on held-out toy prompts.

    make quickstart                      # trains runs/quickstart/drafters/native_all
    .venv/bin/python bench/bench_eval.py [--run runs/quickstart] [--limit 12]

Prints a per-dataset table and writes JSON. Goal (issue 7): at least 3.0 at K = 3 on the
tool-calling families (b1_glaive, b2_hermes, b3_xlam). acceptance_length = tokens per target
verify step, bonus included (SGLang's definition); chain decoding, temperature 0, batch 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from eyas.evaluate.run import run_eval

TOOL_FAMILIES = ("b1_glaive", "b2_hermes", "b3_xlam")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="runs/quickstart")
    ap.add_argument("--ks", default="3,5,7")
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--json", default="bench/results/eval.json")
    args = ap.parse_args()
    run = Path(args.run)
    drafter = run / "drafters" / "native_all" / "drafter"
    if not drafter.exists():
        raise SystemExit(f"{drafter} not found: run `make quickstart` first")
    target = json.loads((drafter / "drafter_config.json").read_text())["target_dir"]
    prompts = run / "eval" / "prepare"
    results = {}
    for k in [int(x) for x in args.ks.split(",")]:
        results[k] = run_eval(target, drafter, prompts, k=k, max_new_tokens=160, limit=args.limit)
    names = sorted(results[min(results)]["datasets"])
    print(f"{'dataset':<16}" + "".join(f"{'K=' + str(k):>10}" for k in results))
    for name in [*names, "all"]:
        cells = [
            r["acceptance_length"] if name == "all" else r["datasets"][name]["acceptance_length"]
            for r in results.values()
        ]
        print(f"{name:<16}" + "".join(f"{c:>10.3f}" for c in cells))
    k3 = results.get(3)
    out = {
        "bench": "eval",
        "metric": "acceptance_length: tokens per target verify step, bonus included (SGLang)",
        "settings": {
            "decoding": "chain",
            "temperature": 0,
            "batch_size": 1,
            "prompts_per_dataset": args.limit,
        },
        "results": {
            str(k): {
                "all": r["acceptance_length"],
                "lossless": r["lossless"],
                "datasets": {n: d["acceptance_length"] for n, d in r["datasets"].items()},
            }
            for k, r in results.items()
        },
        "goal": "K=3 tool families >= 3.0",
        "goal_met": bool(k3)
        and all(
            k3["datasets"][n]["acceptance_length"] >= 3.0
            for n in TOOL_FAMILIES
            if n in k3["datasets"]
        ),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
