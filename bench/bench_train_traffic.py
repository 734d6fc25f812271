"""Elementwise memory traffic per trained token at Kimi-K2.5's width, counted without a GPU: the
bytes every op outside the matmuls and the attention kernel reads and writes in one training
step of eyas's fast path (the CUDA default; and of the reference path, for scale), by the
function that issued it, and the share of them in the functions `--fast-path compiled` compiles
(`eyas.testing.traffic`).

    .venv/bin/python bench/bench_train_traffic.py         # ~1 min on 2 cores

Why: on the 2026-12-04 H200 profile of the fast path (bench/results/train_gpu_profile.txt, 16k
tokens) matmuls took ~44% of the GPU's time, FlexAttention ~20%, and most of the rest was eager
elementwise kernels (mul, copy, sub, exp, ...), each a round trip through the GPU's memory.
This count says which functions those bytes come from, on any machine: a count, not a timing.
Also counted: a trained head's gradient accumulated per loss chunk (before
`fused_loss.WEIGHT_GRAD_CHUNKS`) against once per 4 chunks (now). `--tiny` counts tiny widths
(the test suite's smoke run).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
K = 1024
# (name, target, attention, draft head, path): the peer comparison's equal-parameter case,
# Kimi's, and Kimi MHA's reference path (the H200 measured the fast path 1.43x faster at 16k)
CASES = [
    ("eyas llama frozen", "llama", "mha", "frozen", "on"),
    ("eyas kimi mha", "kimi", "mha", "trained", "on"),
    ("eyas kimi mla", "kimi", "mla", "trained", "on"),
    ("eyas kimi mha reference path", "kimi", "mha", "trained", "off"),
]
# the least time a step's eager elementwise bytes take at each GPU's peak memory bandwidth
# (NVIDIA's H200 and H100 SXM data sheets: 4.8 and 3.35 TB/s): arithmetic, not a measurement
BANDWIDTH_TB_S = {"H200": 4.8, "H100 SXM": 3.35}


def _count(target: Path, tokens: int, attention: str, head: str, path="on", **settings) -> dict:
    from eyas.testing.step_cost import count_traffic

    return count_traffic(
        target, tokens, attention=attention, draft_head=head, ttt=7, fast_path=path,
        activation_checkpointing="off", **settings,
    )  # fmt: skip


def _row(name: str, tokens: int, r: dict, top: int = 12) -> dict:
    per = 1e6 * tokens
    regions = list(r["by_region"].items())
    return {
        "case": name,
        "tokens": tokens,
        "mb_per_token": round(r["bytes"] / per, 2),
        "kernel_operand_mb_per_token": round(r["kernel_bytes"] / per, 2),
        "compiled_share": round(r["compiled_bytes"] / r["bytes"], 3),
        "floor_ms": {
            gpu: round(r["bytes"] / (bw * 1e12) * 1e3, 1) for gpu, bw in BANDWIDTH_TB_S.items()
        },
        "by_region_mb_per_token": {k: round(v / per, 2) for k, v in regions[:top]},
        "other_regions_mb_per_token": round(sum(v for _, v in regions[top:]) / per, 2),
        "by_op_mb_per_token": {k: round(v / per, 2) for k, v in list(r["by_op"].items())[:8]},
    }


def _lengths(text: str) -> list[int]:
    """`--tokens`: comma-separated positive lengths (a usage error otherwise)."""
    try:
        lengths = [int(x) for x in text.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated token counts, e.g. 4096,16384")
    return lengths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="4096,16384", type=_lengths)
    ap.add_argument("--json", type=Path, default=ROOT / "bench/results/train_traffic.json")
    ap.add_argument("--tiny", action="store_true", help="tiny widths, 256 tokens: a smoke run")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    sys.path.insert(0, str(ROOT / "bench"))
    from peers import commit, write_results

    from eyas.drafter import fused_loss
    from eyas.testing.wide import write_target

    started, load_before = time.time(), os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="eyas-traffic-"))
    targets = {k: write_target(work / k, k, tiny=args.tiny) for k in ("kimi", "llama")}
    lengths = [256] if args.tiny else args.tokens
    settings = {"draft_vocab": 64} if args.tiny else {}
    rows, per_chunk = [], []
    for t in lengths:
        for name, target, attention, head, path in CASES:
            r = _count(targets[target], t, attention, head, path, **settings)
            rows.append(_row(name, t, r))
            print(f"{name:<30}{t:>7}{rows[-1]['mb_per_token']:>9} MB/token", flush=True)
        # the trained head's gradient accumulated per chunk: the count before WEIGHT_GRAD_CHUNKS
        kept = fused_loss.WEIGHT_GRAD_CHUNKS
        fused_loss.WEIGHT_GRAD_CHUNKS = 1
        try:
            r = _count(targets["kimi"], t, "mha", "trained", **settings)
        finally:
            fused_loss.WEIGHT_GRAD_CHUNKS = kept
        now = next(x for x in rows if x["case"] == "eyas kimi mha" and x["tokens"] == t)
        per_chunk.append(
            {
                "tokens": t,
                "per_chunk_mb_per_token": round(r["bytes"] / 1e6 / t, 2),
                "now_mb_per_token": now["mb_per_token"],
                "weight_grad_chunks": kept,
            }
        )
    print(f"\n{'case':<30}{'tokens':>7}{'MB/token':>10}{'compiled':>10}  top regions (MB/token)")
    for r in rows:
        top = ", ".join(f"{k} {v}" for k, v in list(r["by_region_mb_per_token"].items())[:4])
        print(
            f"{r['case']:<30}{r['tokens']:>7}{r['mb_per_token']:>10}"
            f"{r['compiled_share']:>10.0%}  {top}"
        )
    for p in per_chunk:
        print(
            f"kimi mha {p['tokens']}: head gradient per chunk {p['per_chunk_mb_per_token']} "
            f"MB/token, per {p['weight_grad_chunks']} chunks {p['now_mb_per_token']}"
        )
    record = {
        "bench": "train_traffic",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["bench/bench_train_traffic.py", *sys.argv[1:]]),
        "commit": commit(),
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()} (counted on fake tensors: no "
        "device, so the figures do not depend on it)",
        "tiny": args.tiny,
        "ttt": 7,
        "autocast": "bf16 (CPU autocast: the matmuls' casts are CUDA's; every fp32 op is cast "
        "explicitly in eyas's code)",
        "bandwidth_tb_s": BANDWIDTH_TB_S,
        "cases": rows,
        "weight_grad_per_chunk": per_chunk,
    }
    write_results(args.json, record, started, load_before)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
