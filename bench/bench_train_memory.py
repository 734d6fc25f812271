"""Peak memory and step time of drafter training against sequence length, on CPU.

    .venv/bin/python bench/bench_train_memory.py [--lengths 1024,2048,...,32768] [--no-peer]

One synthetic sample of T tokens (random ids, 16 prompt tokens, the rest supervised), trained
2 steps at TTT 3 through `eyas train`'s Trainer on the toy tiny target (online target,
hidden 96), each length in a fresh process. Extra peak memory = the process's peak RSS above
the same run at T = 256. Growth per doubling = extra(2T) / extra(T): linear memory gives 2,
quadratic 4. Goals: at most 2.2x per doubling, 8,192 tokens at most 6x the extra memory of
2,048, and 32k trains on this machine.

Peer: speculators 0.9.0 `Eagle3DraftModel` (sdpa, eager KL loss, TTT 3) on the same dims with
random states (bench/peer_speculators_memory.py in the speculators venv), at the lengths it
fits in `--peer-limit-gb` within `--timeout` seconds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = 256


def child_eyas(length: int) -> dict:
    """Run in a fresh process: train one T-token sample for 2 steps; peak RSS and step time."""
    from eyas.config import TrainConfig
    from eyas.toy.build import build_toy
    from eyas.train.loop import Trainer

    model_dir = build_toy("tiny")
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    rng = random.Random(length)
    with tempfile.TemporaryDirectory() as tmp:
        ids = [rng.randrange(300, vocab - 300) for _ in range(length)]
        sample = {
            "id": f"{length:032x}",
            "dataset": "bench",
            "turn": 1,
            "prompt_ids": ids[:16],
            "output_ids": ids[16:],
            "finish_reason": "stop",
            "messages": [],
            "tools": [],
        }
        data = Path(tmp) / "s.jsonl"
        data.write_text(json.dumps(sample) + "\n")
        cfg = TrainConfig(
            target=model_dir,
            data=data,
            out=Path(tmp) / "d",
            steps=2,
            ttt=3,
            draft_vocab=256,
            batch_tokens=length + 64,
            # past the tiny toy's 4,096 positions: RoPE extends, and memory is what is measured
            max_len=length + 16,
            warmup_steps=0,
            checkpoint_every=10_000,
        )
        trainer = Trainer(cfg, log=lambda s: None)
        trainer.setup()
        hist = trainer.train()
        trainer.cleanup()
    step_s = hist[-1]["elapsed_s"] - hist[0]["elapsed_s"]
    return {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": round(step_s, 2),
        "trained_positions": hist[-1]["trained_positions"],
    }


def run_child(cmd: list[str], timeout: float, env: dict | None = None) -> dict | str:
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired:
        return f"over {timeout:.0f} s"
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return f"failed (rc {proc.returncode}: {tail[0][:120]})"
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer-limit-gb", type=float, default=16)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json", default="bench/results/train_memory.json")
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child_eyas(args.child)), flush=True)
        return
    lengths = [int(x) for x in args.lengths.split(",")]
    me = [sys.executable, str(Path(__file__).resolve())]
    base = run_child([*me, "--child", str(BASELINE)], args.timeout)
    if isinstance(base, str):
        raise SystemExit(f"baseline run {base}")
    rows = []
    for t in lengths:
        t0 = time.perf_counter()
        got = run_child([*me, "--child", str(t)], args.timeout)
        row = {"tokens": t, "wall_s": round(time.perf_counter() - t0, 1)}
        if isinstance(got, str):
            row["eyas"] = got
        else:
            row["eyas"] = {**got, "extra_mb": round(got["peak_rss_mb"] - base["peak_rss_mb"])}
        rows.append(row)
        print(f"eyas T={t}: {row['eyas']}", flush=True)
    peer_base = None
    if not args.no_peer:
        from peers import speculators_venv

        py = str(speculators_venv() / "bin" / "python")
        peer = [py, str(ROOT / "bench" / "peer_speculators_memory.py"), "--verifier"]
        model_dir = json.loads(
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from eyas.toy.build import build_toy; import json; "
                    "print(json.dumps(str(build_toy('tiny'))))",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        limit = ["--limit-gb", str(args.peer_limit_gb)]
        peer_base = run_child([*peer, model_dir, "--tokens", str(BASELINE), *limit], args.timeout)
        for row in rows:
            if isinstance(peer_base, str):
                row["speculators"] = f"baseline {peer_base}"
                continue
            got = run_child(
                [*peer, model_dir, "--tokens", str(row["tokens"]), *limit], args.timeout
            )
            row["speculators"] = (
                got
                if isinstance(got, str)
                else {**got, "extra_mb": round(got["peak_rss_mb"] - peer_base["peak_rss_mb"])}
            )
            print(f"speculators T={row['tokens']}: {row['speculators']}", flush=True)
    for prev, row in itertools.pairwise(rows):
        a, b = prev["eyas"], row["eyas"]
        if isinstance(a, dict) and isinstance(b, dict) and a["extra_mb"] > 0:
            row["eyas_growth"] = round(b["extra_mb"] / a["extra_mb"], 2)
    by_t = {r["tokens"]: r["eyas"] for r in rows if isinstance(r["eyas"], dict)}
    ratio_8k_2k = (
        round(by_t[8192]["extra_mb"] / by_t[2048]["extra_mb"], 2)
        if 8192 in by_t and 2048 in by_t and by_t[2048]["extra_mb"] > 0
        else None
    )

    def cell(v, key):
        if isinstance(v, dict):
            return f"{v[key]:,}"
        return "out of memory" if "allocate memory" in str(v) else str(v).split(" (")[0][:14]

    print(f"\nTTT 3, toy tiny (hidden 96), one sample; extra = peak RSS above T={BASELINE}")
    print(
        f"{'T':>7}{'eyas extra MB':>15}{'step s':>9}{'growth':>8}{'spec. extra MB':>19}{'spec. step s':>14}"
    )
    for r in rows:
        spec = r.get("speculators", "-")
        print(
            f"{r['tokens']:>7}{cell(r['eyas'], 'extra_mb'):>15}{cell(r['eyas'], 'step_s'):>9}"
            f"{r.get('eyas_growth', '-'):>8}{cell(spec, 'extra_mb'):>19}{cell(spec, 'step_s'):>14}"
        )
    print(f"8,192 vs 2,048 extra memory: {ratio_8k_2k}x (goal <= 6)")
    out = {
        "bench": "train_memory",
        "device": "cpu",
        "preset": "tiny",
        "ttt": 3,
        "baseline_tokens": BASELINE,
        "baseline": base,
        "peer_baseline": peer_base,
        "rows": rows,
        "extra_8k_over_2k": ratio_8k_2k,
        "goals": {"growth_per_doubling": 2.2, "extra_8k_over_2k": 6},
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
