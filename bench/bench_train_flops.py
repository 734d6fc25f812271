"""FLOPs per trained token and peak memory at Kimi-K2.5's width, counted without a GPU: eyas and
speculators 0.9.0 by `torch.utils.flop_counter.FlopCounterMode` on fake/meta tensors, and eyas's
peak traced op by op (`eyas.testing.step_cost`), beside the budget's figures.

    .venv/bin/python bench/bench_train_flops.py            # ~30 min on 2 busy cores

FLOPs of one forward + backward on one T-token sequence, TTT 7, a 32k draft vocabulary, each
side's matmuls as FlopCounterMode counts them and its attention kernel charged by the formula
FlopCounterMode applies to FlexAttention (dense: no causal or block-sparse discount;
`eyas.testing.attention_flops`). eyas: its fast path (the CUDA default) and its reference path,
MHA and MLA on Kimi-K2.5's config, and MHA with GQA on a Llama-shaped verifier of the same width
(the peer comparison's), its draft head trained (default) or frozen; speculators: its
`Eagle3DraftModel` on that verifier, head frozen (as it ships) or trained. Equal trainable
parameters: eyas frozen against speculators' default (756M), eyas's default against speculators
trained (985M). The budget's count (`eyas.train.step_flops`) equals eyas's (tested).

Memory: the peak of one training step (bf16 autocast, fp32 AdamW, what `eyas train` holds) traced
on fake tensors for the fast path at 4k and 16k tokens (the reference path's traces reproduce the 2026-12-04 H200 peaks
within 4%: docs/training-scale.md), beside the budget's estimate. Writes
bench/results/train_flops.json; `--traced-only` retraces the peaks alone (minutes), keeping the
file's FLOP rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
K = 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="4096,16384,32768")
    ap.add_argument("--trace-tokens", default="4096,16384")
    ap.add_argument("--json", type=Path, default=ROOT / "bench/results/train_flops.json")
    ap.add_argument(
        "--traced-only", action="store_true",
        help="retrace the peaks only, keeping the FLOP rows of the --json file (minutes: for a "
        "change of what the trainer holds, which moves memory and not FLOPs)",
    )  # fmt: skip
    args = ap.parse_args()
    if args.traced_only and not args.json.is_file():
        ap.error(f"--traced-only keeps the FLOP rows of {args.json}, which does not exist")
    warnings.filterwarnings("ignore")
    from peers import speculators_venv, write_results
    from safetensors.torch import save_file

    from eyas.testing import speculators_flops_peer
    from eyas.testing.step_cost import count_flops, trace_memory
    from eyas.testing.wide import random_vocab, write_target
    from eyas.train.budget import kimi_table

    started, load_before = time.time(), os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="eyas-flops-"))
    kimi, llama = write_target(work / "kimi", "kimi"), write_target(work / "llama", "llama")
    maps = random_vocab(163840)
    save_file({"t2d": maps["t2d"], "d2t": maps["d2t"]}, str(work / "vocab.safetensors"))
    lengths = [] if args.traced_only else [int(x) for x in args.tokens.split(",")]
    eyas_rows, spec_rows, traced = [], [], []

    def say(msg: str) -> None:
        print(f"[{time.time() - started:6.0f}s] {msg}", flush=True)

    configs = [
        ("llama", "mha", "on", "frozen"),
        ("llama", "mha", "on", "trained"),
        ("kimi", "mha", "on", "trained"),
        ("kimi", "mla", "on", "trained"),
        ("kimi", "mha", "off", "trained"),
    ]
    for t in lengths:
        for target, attention, fast, head in configs:
            ac = "on" if t > 4 * K else "off"  # `auto`
            r = count_flops(
                llama if target == "llama" else kimi, t, attention=attention, fast_path=fast,
                draft_head=head, ttt=7, activation_checkpointing=ac,
            )  # fmt: skip
            row = {
                "target": target, "attention": attention, "path": "fast" if fast == "on" else "reference",
                "draft_head": head, "activation_checkpointing": ac == "on", "tokens": t,
                "trainable_parameters": r["trainable_parameters"], "flops": r["flops"],
                "gflop_per_token": round(r["flops"] / t / 1e9, 2),
                "attention_gflop_per_token": round(r["attention_flops"] / t / 1e9, 2),
                "budget_gflop_per_token": r["budget_gflop_per_token"],
                "budget_equals_count": r["budget_flops"] == r["flops"],
            }  # fmt: skip
            eyas_rows.append(row)
            say(f"eyas {target} {attention} {row['path']} {head} {t}: {row['gflop_per_token']}")
        for head in ("frozen", "trained"):
            out = subprocess.run(
                [str(speculators_venv() / "bin" / "python"), speculators_flops_peer.__file__,
                 "--verifier", str(llama), "--vocab", str(work / "vocab.safetensors"),
                 "--tokens", str(t), *(["--train-head"] if head == "trained" else [])],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            r = json.loads(out.stdout.strip().splitlines()[-1])
            spec_rows.append(
                {
                    "tokens": t,
                    "train_head": head == "trained",
                    "trainable_parameters": r["trainable_parameters"],
                    "flops": r["flops"],
                    "gflop_per_token": round(r["flops"] / t / 1e9, 2),
                    "attention_gflop_per_token": round(r["attention_flops"] / t / 1e9, 2),
                }
            )
            say(f"speculators {head} {t}: {spec_rows[-1]['gflop_per_token']}")
    for t in [int(x) for x in args.trace_tokens.split(",")]:
        for attention in ("mha", "mla"):
            for ac in ("on", "off"):
                r = trace_memory(
                    kimi, t, attention=attention, draft_head="trained", ttt=7,
                    activation_checkpointing=ac, fast_path="on",
                )  # fmt: skip
                budget = kimi_table(
                    gpus=(1,), tokens_per_rank=t, checkpointing=ac == "on", attention=attention
                )[0]
                traced.append(
                    {
                        "attention": attention,
                        "activation_checkpointing": ac == "on",
                        "tokens": t,
                        "path": "fast",
                        "static_gb": round(r["static_bytes"] / 1e9, 3),
                        "traced_peak_gb": round(r["peak_bytes"] / 1e9, 3),
                        "budget_gb": budget["total_gb"],
                    }
                )
                say(f"traced fast {attention} AC {ac} {t}: {traced[-1]}")
    print(f"{'':<44}{'tokens':>8}{'trainable':>12}{'GFLOP/token':>13}{'attention':>11}")
    for r in eyas_rows:
        name = f"eyas {r['target']} {r['attention']} {r['path']} head {r['draft_head']}"
        print(
            f"{name:<44}{r['tokens']:>8}{r['trainable_parameters'] / 1e6:>11.0f}M"
            f"{r['gflop_per_token']:>13}{r['attention_gflop_per_token']:>11}"
        )
    for r in spec_rows:
        name = f"speculators head {'trained' if r['train_head'] else 'frozen'}"
        print(
            f"{name:<44}{r['tokens']:>8}{r['trainable_parameters'] / 1e6:>11.0f}M"
            f"{r['gflop_per_token']:>13}{r['attention_gflop_per_token']:>11}"
        )
    if args.traced_only:
        record = json.loads(args.json.read_text())
        record["traced"] = traced
        record["traced_run"] = {
            "date": time.strftime("%Y-%m-%d"),
            "command": " ".join(["bench/bench_train_flops.py", *sys.argv[1:]]),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "seconds": round(time.time() - started, 1),
        }
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        say(f"retraced the peaks in {args.json}")
        return
    record = {
        "bench": "train_flops",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["bench/bench_train_flops.py", *sys.argv[1:]]),
        "machine": f"{os.cpu_count()} CPUs (counted on fake tensors: no device)",
        "ttt": 7,
        "draft_vocab": maps["draft_vocab_size"],
        "eyas": eyas_rows,
        "speculators": spec_rows,
        "traced": traced,
    }
    write_results(args.json, record, started, load_before)
    say(f"wrote {args.json}")


if __name__ == "__main__":
    main()
