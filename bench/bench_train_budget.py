"""The per-GPU memory and throughput estimate (`eyas.train.budget`) at Kimi-K2.5 width, for
1, 8 and 16 H200s (FSDP2, TTT 7, 16,384 tokens per rank per micro-batch). Arithmetic, not a
measurement: the same formula `eyas train` prints at start.

    .venv/bin/python bench/bench_train_budget.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from eyas.train.budget import ACT_BYTES_PER_TOKEN_STEP_PER_HIDDEN, ASSUMED_MFU, kimi_table


def main() -> None:
    rows = kimi_table()
    print("Kimi-K2.5 drafter, TTT 7, FSDP2, 16,384 tokens per rank (estimate, not measured)")
    print(
        f"{'GPUs':>5}{'trainable GB':>14}{'frozen GB':>11}{'activ. GB':>11}{'total GB':>10}"
        f"{'tokens/s':>10}"
    )
    for r in rows:
        print(
            f"{r['world']:>5}{r['trainable_gb']:>14}{r['frozen_gb']:>11}"
            f"{r['activations_gb']:>11}{r['total_gb']:>10}{r['tokens_per_s']:>10,}"
        )
    out = {
        "bench": "train_budget",
        "kind": "arithmetic estimate (eyas.train.budget), not a measurement",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "assumptions": {
            "mfu": ASSUMED_MFU,
            "act_bytes_per_token_step_per_hidden": ACT_BYTES_PER_TOKEN_STEP_PER_HIDDEN,
            "peak_bf16_flops": 989e12,
            "ttt": 7,
            "tokens_per_rank": 16_384,
        },
        "rows": rows,
    }
    path = Path("bench/results/train_budget.json")
    path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
