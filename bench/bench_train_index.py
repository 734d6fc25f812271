"""The training index at scale: resident memory per token, and step time against sample count.

    .venv/bin/python bench/bench_train_index.py [--samples 2000,200000] [--steps 40] [--work DIR]

Builds, with the real capture writer (`CaptureWriter`), two synthetic captures of a tiny
target (a Llama of hidden size 8, 4 layers, random weights, the toy tokenizer): *small*, 2k
samples, and *large*, 200k samples (about 10.4M tokens), both of 20-84 tokens per sample. States are random: the index and the loop are what is measured, not learning.

- Index memory: in a fresh process, resident memory (VmRSS) after `load_captured_sequences`
  minus before, per captured token (and, for information, after glibc's `malloc_trim`: the
  part of it that is freed memory the C allocator keeps); the same for the per-row Python index
  (`read_capture_index`, what training held before) for comparison. Goal: <= 8 B per token.
- Step time: in a fresh process per capture, `eyas train --hidden-states` (the Trainer) for
  `--steps` steps of the same `batch_tokens`; the median step after the first five. Goal: the
  200k-sample capture within 1.2x of the 2k-sample one.

Scratch data goes to a temporary directory under --work and is deleted at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIDDEN = 8


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def build_target(work: Path) -> Path:
    """A real HF Llama checkpoint of hidden size 8 (random weights) with the toy tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from eyas.toy.build import build_toy

    toy = build_toy("tiny")
    out = work / "target"
    cfg = json.loads((toy / "config.json").read_text())
    cfg.update(
        hidden_size=HIDDEN,
        intermediate_size=16,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=HIDDEN,
    )
    LlamaForCausalLM(LlamaConfig(**cfg)).save_pretrained(out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (toy / name).exists():
            shutil.copy(toy / name, out / name)
    return out


def build_capture(path: Path, samples: int, seed: int) -> int:
    """`samples` samples of 20-84 tokens through the real writer; returns the token count."""
    import numpy as np
    import torch

    from eyas.store.captures import CaptureWriter

    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 85, size=samples)
    writer = CaptureWriter(path, shard_size=5_000, dtype=torch.bfloat16)
    for lo in range(0, samples, 5_000):
        chunk = lengths[lo : lo + 5_000]
        states = torch.randn(int(chunk.sum()), 4, HIDDEN, dtype=torch.bfloat16)
        ids = rng.integers(10, 1000, size=int(chunk.sum())).tolist()
        at = 0
        for k, n in enumerate(chunk.tolist()):
            mask = [0] * (n // 4) + [1] * (n - n // 4)
            writer.add(f"{lo + k:016x}", "synthetic", states[at : at + n], ids[at : at + n], mask)
            at += n
    writer.flush()
    (path / "manifest.json").write_text(
        json.dumps({"aux_layers": [1, 2, 3], "layers": [1, 2, 3, 4], "excluded": {}})
    )
    return int(lengths.sum())


def child_memory(capture: Path, kind: str) -> dict:
    from eyas.store.captures import read_capture_index
    from eyas.train.data import load_captured_sequences

    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    if kind == "packed":
        index, _, _ = load_captured_sequences(capture, 1 << 20)
        tokens, arrays = int(index.lengths.sum()), index.nbytes()
    else:
        index, _ = read_capture_index(capture)
        tokens, arrays = sum(r.end - r.start for r in index), None
    load_s = time.perf_counter() - t0
    gc.collect()
    after = rss_bytes()
    trimmed = None
    try:  # what of the rest is freed memory glibc keeps (eyas itself never calls malloc_trim)
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        trimmed = round((rss_bytes() - before) / tokens, 2)
    except (OSError, AttributeError):
        pass
    return {
        "tokens": tokens,
        "samples": len(index),
        "rss_delta_bytes": after - before,
        "rss_bytes_per_token": round((after - before) / tokens, 2),
        "array_bytes_per_token": round(arrays / tokens, 2) if arrays else None,
        "load_s": round(load_s, 2),
        "rss_bytes_per_token_after_malloc_trim": trimmed,
    }


def child_steps(capture: Path, target: Path, steps: int) -> dict:
    from eyas.train.config import TrainConfig
    from eyas.train.loop import Trainer

    with tempfile.TemporaryDirectory(dir=capture.parent) as out:
        cfg = TrainConfig(
            target=target,
            hidden_states=capture,
            out=Path(out),
            steps=steps,
            ttt=3,
            draft_vocab=256,
            batch_tokens=4096,
            max_len=1024,
            warmup_steps=0,
            checkpoint_every=1_000_000,
        )
        trainer = Trainer(cfg, log=lambda s: None)
        t0 = time.perf_counter()
        trainer.setup()
        setup_s = time.perf_counter() - t0
        hist = trainer.train()
        trainer.cleanup()
    times = [b.elapsed_s - a.elapsed_s for a, b in itertools.pairwise(hist)][4:]
    return {
        "setup_s": round(setup_s, 2),
        "median_step_s": round(statistics.median(times), 4),
        "steps_timed": len(times),
    }


def run_child(args: list[str]) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        env=env,
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", default="2000,200000")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--work", default=None, help="scratch parent (default: the system's)")
    ap.add_argument("--json", default="bench/results/train_index.json")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, capture, *rest = args.child
        if kind == "steps":
            got = child_steps(Path(capture), Path(rest[0]), int(rest[1]))
        else:
            got = child_memory(Path(capture), kind)
        print("RESULT " + json.dumps(got), flush=True)
        return
    small_n, large_n = (int(x) for x in args.samples.split(","))
    samples = {"small": small_n, "large": large_n}
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=args.work, prefix="train-index-"))
    rows = {}
    try:
        target = build_target(work)
        for name, n in samples.items():
            t0 = time.perf_counter()
            tokens = build_capture(work / name, n, seed=len(name))
            disk = sum(p.stat().st_size for p in (work / name).iterdir())
            rows[name] = {
                "samples": n,
                "tokens": tokens,
                "capture_mb": round(disk / 2**20),
                "build_s": round(time.perf_counter() - t0, 1),
            }
            print(f"built {name}: {rows[name]}", flush=True)
        for name in samples:
            cap = str(work / name)
            rows[name]["packed"] = run_child(["--child", "packed", cap])
            rows[name]["python_lists"] = run_child(["--child", "lists", cap])
            rows[name]["train"] = run_child(["--child", "steps", cap, str(target), str(args.steps)])
            print(f"{name}: {rows[name]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    small, large = rows["small"], rows["large"]
    ratio = round(large["train"]["median_step_s"] / small["train"]["median_step_s"], 3)
    print(f"\nindex memory and step time, capture of hidden {HIDDEN} (bf16, 4 layers)")
    print(
        f"{'capture':>8}{'samples':>9}{'tokens':>12}{'packed B/tok':>14}{'arrays B/tok':>14}"
        f"{'lists B/tok':>13}{'step s':>9}{'setup s':>9}"
    )
    for name, r in rows.items():
        print(
            f"{name:>8}{r['samples']:>9,}{r['tokens']:>12,}"
            f"{r['packed']['rss_bytes_per_token']:>14}{r['packed']['array_bytes_per_token']:>14}"
            f"{r['python_lists']['rss_bytes_per_token']:>13}"
            f"{r['train']['median_step_s']:>9}{r['train']['setup_s']:>9}"
        )
    print(f"step time {samples['large']:,} vs {samples['small']:,} samples: {ratio}x (goal <= 1.2)")
    out = {
        "bench": "train_index",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "device": "cpu",
        "hidden_size": HIDDEN,
        "batch_tokens": 4096,
        "ttt": 3,
        "rows": rows,
        "step_time_ratio_large_over_small": ratio,
        "goals": {"index_bytes_per_token": 8, "step_time_ratio": 1.2},
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
