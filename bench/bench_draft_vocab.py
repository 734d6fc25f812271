"""The draft vocabulary's size against acceptance and step time: EAGLE-3 trained at 8k, 32k and
the full vocabulary, on the Kimi-K2.5-layout toy and on SmolLM2-135M-Instruct.

    nice -n 10 .venv/bin/python bench/bench_draft_vocab.py

Kimi-K2.5 has 163,840 tokens; the published Kimi drafters keep all of them, eyas's old default
was 32,000. The toy's vocabulary has 1,024 tokens, so its sizes are scaled by 1,024 / 163,840
(8k -> 51, 32k -> 200, full 1,024: the same shares of the vocabulary); SmolLM2 (49,152 tokens)
takes 8,192, 32,000 and 49,152 as they are. Per target: its own generated training data and
held-out prompts (`bench_methods._data`: the target's template, regenerated in process), the
same training budget for every size (`--steps`, same seed, data order and optimiser), then
offline lossless chain decoding at K = 3 on held-out prompts: acceptance length (bonus
included), the coverage of the supervised training tokens by the draft vocabulary (what `eyas
train` reports; a token outside it is a certain rejection), the training seconds per step and
the drafter's milliseconds per verify step. The three sizes of a
target run one after another in one process: compare their ratios, not absolute times (a
shared, loaded machine; the load average is recorded). Prints a table; writes
bench/results/draft_vocab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch
from bench_methods import _data, _offline

from eyas.evaluate.prompts import load_prompts
from eyas.hf_models import target_model
from eyas.jsonl import read_json_object
from eyas.train.config import TrainConfig
from eyas.train.loop import run_train

KIMI_VOCAB = 163840
SIZES = (8192, 32000)  # and the full vocabulary


def sizes_for(vocab: int) -> list[tuple[str, int]]:
    """(label, size): 8k and 32k as they are where they fit, else scaled to the same share of
    Kimi-K2.5's vocabulary; then the full vocabulary."""
    scale = 1.0 if vocab >= max(SIZES) else vocab / KIMI_VOCAB
    return [(f"{s // 1000}k", max(2, round(s * scale))) for s in SIZES] + [("full", vocab)]


def run_target(name: str, target: Path, out: Path, args, on_size=None) -> dict:
    vocab = target_model(target).vocab_size
    data, eval_dir = _data(target, out / "data", args.rows, args.max_new_tokens)
    prompts = load_prompts(eval_dir, args.limit)
    rows = {}
    for label, size in sizes_for(vocab):
        cfg = TrainConfig(
            target=target,
            data=data,
            out=out / f"v{size}",
            method="eagle3",
            steps=args.steps,
            ttt=3,
            draft_vocab=size,
            max_len=2048,
            batch_tokens=args.batch_tokens,
            lr=args.lr,
            warmup_steps=max(1, args.steps // 10),
            checkpoint_every=10**6,
        )
        timing = cfg.out / "bench_train_seconds.json"
        if timing.exists():  # trained by an earlier, interrupted run of this benchmark
            drafter, train_s = cfg.out / "drafter", json.loads(timing.read_text())
        else:
            start = time.perf_counter()
            drafter = run_train(cfg, log=lambda s: None).drafter
            train_s = time.perf_counter() - start
            timing.write_text(json.dumps(train_s))
        saved = read_json_object(drafter / "drafter_config.json")
        offline = _offline(target, drafter, prompts, args.k, args.eval_max_new_tokens)
        rows[label] = {
            "draft_vocab_size": saved["draft_vocab_size"],
            "train_coverage": saved.get("vocab", {}).get("coverage"),
            "acceptance_length": offline["acceptance_length"],
            "lossless": offline["lossless"],
            "train_s_per_step": round(train_s / args.steps, 3),
            "drafter_ms_per_verify_step": offline["drafter_ms_per_verify_step"],
            "head_parameters": saved["draft_vocab_size"] * saved["hidden_size"],
        }
        print(f"{name:10} {label:5} {rows[label]}", flush=True)
        if on_size is not None:
            on_size({"target": str(target), "vocab_size": vocab, "sizes": rows})
    return {"target": str(target), "vocab_size": vocab, "sizes": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("runs/bench_draft_vocab"))
    ap.add_argument("--rows", type=int, default=8, help="rows per toy dataset")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--eval-max-new-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--limit", type=int, default=2, help="held-out prompts per dataset")
    ap.add_argument("--targets", default="kimi_toy,smollm2")
    ap.add_argument("--json", type=Path, default=Path("bench/results/draft_vocab.json"))
    args = ap.parse_args()
    torch.manual_seed(0)
    load_before = os.getloadavg()
    targets = {}
    for name in args.targets.split(","):
        if name == "kimi_toy":
            from eyas.toy.build import build_toy

            targets[name] = build_toy("kimi")
        else:
            cache = Path(os.environ.get("EYAS_CACHE", Path.home() / ".cache/eyas"))
            targets[name] = cache / "smollm2-135m-instruct" / "model"
    results: dict[str, dict] = {}

    def write() -> None:  # after every size: an interrupted run keeps what it measured
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "command": " ".join(["bench/bench_draft_vocab.py", *sys.argv[1:]]),
                    "settings": {k: str(v) for k, v in vars(args).items()},
                    "machine": platform.platform(),
                    "cpus": os.cpu_count(),
                    "loadavg_before": load_before,
                    "loadavg_after": os.getloadavg(),
                    "note": "sizes of a target measured one after another in one process: "
                    "compare ratios within a target; the Kimi toy's 8k/32k are scaled to its "
                    "1,024-token vocabulary (the same shares of Kimi-K2.5's 163,840)",
                    "results": results,
                },
                indent=2,
            )
            + "\n"
        )

    for n, t in targets.items():
        results[n] = run_target(
            n, t, args.out / n, args, lambda r, n=n: (results.update({n: r}), write())
        )
    print(f"\n{'target':10} {'size':5} {'vocab':>7} {'AL':>6} {'train s/step':>13} {'draft ms':>9}")
    for name, res in results.items():
        for label, r in res["sizes"].items():
            print(
                f"{name:10} {label:5} {r['draft_vocab_size']:>7} {r['acceptance_length']:>6} "
                f"{r['train_s_per_step']:>13} {r['drafter_ms_per_verify_step']:>9}"
            )
    write()


if __name__ == "__main__":
    main()
