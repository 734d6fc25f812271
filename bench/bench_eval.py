"""Acceptance length of the quickstart drafter: offline chains (K = 3, 5, 7), offline trees, and
served inside vLLM on CPU, on the quickstart's held-out toy prompts.

    make quickstart                      # trains runs/quickstart/drafters/native_all
    .venv/bin/python bench/bench_eval.py [--run runs/quickstart] [--limit 12] [--no-served]

acceptance_length = tokens per target verify step, bonus included (SGLang's definition);
temperature 0, lossless against greedy decoding. Trees are SGLang-style (`--topk` branches per
step, depth K, `num_draft_tokens` verified). Served: vLLM's spec-decode counters (chain K = 3),
beside the drafter's own estimate from its TTT accuracies in metrics.jsonl. Goal: at least 3.0
at K = 3 on the tool-calling families (b1_glaive, b2_hermes, b3_xlam).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from peers import commit

from eyas.evaluate.config import EvalConfig
from eyas.evaluate.result import EvalResult
from eyas.evaluate.run import run_eval

TOOL_FAMILIES = ("b1_glaive", "b2_hermes", "b3_xlam")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", default="runs/quickstart")
    ap.add_argument("--ks", default="3,5,7")
    ap.add_argument("--trees", default="2:6,4:10", help="topk:num_draft_tokens at depth 3")
    ap.add_argument("--limit", type=int, default=12)
    ap.add_argument("--no-served", action="store_true")
    ap.add_argument("--json", default="bench/results/eval.json")
    args = ap.parse_args()
    run = Path(args.run)
    drafter = run / "drafters" / "native_all"
    if not (drafter / "drafter").exists():
        raise SystemExit(f"{drafter} not found: run `make quickstart` first")
    dcfg = json.loads((drafter / "drafter" / "drafter_config.json").read_text())
    target = Path(dcfg["target_dir"])
    prompts = run / "eval" / "prepare"
    base = {
        "target": target,
        "drafter": drafter,
        "input": prompts,
        "max_new_tokens": 160,
        "limit": args.limit,
    }
    quiet = lambda s: None  # noqa: E731
    started, load_start = time.time(), os.getloadavg()
    rows: dict[str, EvalResult] = {}
    for k in [int(x) for x in args.ks.split(",")]:
        rows[f"chain K={k}"] = run_eval(EvalConfig(**base, k=k), quiet)
    for spec in filter(None, args.trees.split(",")):
        topk, n = (int(x) for x in spec.split(":"))
        rows[f"tree K=3 topk={topk} n={n}"] = run_eval(
            EvalConfig(**base, k=3, topk=topk, num_draft_tokens=n), quiet
        )
    if not args.no_served:
        from peers import vllm_python

        rows["served vLLM chain K=3"] = run_eval(
            EvalConfig(**base, k=3, backend="vllm", engine={"python": vllm_python()}), quiet
        )
    metrics = [json.loads(x) for x in (drafter / "metrics.jsonl").read_text().splitlines()]
    estimate = next(
        (m["acceptance_estimate"] for m in reversed(metrics) if "acceptance_estimate" in m), None
    )
    names = sorted(rows["chain K=3"].datasets)
    print(f"{'':<26}" + "".join(f"{n[:11]:>12}" for n in [*names, "all"]) + f"{'lossless':>10}")
    for label, r in rows.items():
        cells = [d.acceptance_length if (d := r.datasets.get(n)) else float("nan") for n in names]
        print(
            f"{label:<26}"
            + "".join(f"{c:>12.3f}" for c in [*cells, r.acceptance_length])
            + f"{r.lossless!s:>10}"
        )
    print(f"the drafter's own estimate at its last checkpoint (TTT 3 accuracies): {estimate}")
    k3 = rows["chain K=3"]
    out = {
        "bench": "eval",
        "metric": "acceptance_length: tokens per target verify step, bonus included (SGLang)",
        "settings": {
            "temperature": 0,
            "prompts_per_dataset": args.limit,
            "max_new_tokens": 160,
            "draft_vocab": dcfg.get("draft_vocab_size"),
        },
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["bench/bench_eval.py", *sys.argv[1:]]),
        "commit": commit(),  # the eyas that measured (the drafter's is in its manifest)
        "drafter": str(drafter),
        "machine": f"{os.cpu_count()} CPUs",
        "load_average": {"start": list(load_start), "end": list(os.getloadavg())},
        "seconds": round(time.time() - started, 1),
        "results": {
            label: {
                "all": r.acceptance_length,
                "lossless": r.lossless,
                "datasets": {n: d.acceptance_length for n, d in r.datasets.items()},
                **({"throughput": r.throughput.to_dict()} if r.throughput else {}),
            }
            for label, r in rows.items()
        },
        "training_estimate": estimate,
        "goal": "K=3 tool families >= 3.0",
        "goal_met": all(
            k3.datasets[n].acceptance_length >= 3.0 for n in TOOL_FAMILIES if n in k3.datasets
        ),
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
