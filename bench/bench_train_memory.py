"""Peak memory and step time of drafter training against sequence length, on CPU.

    .venv/bin/python bench/bench_train_memory.py [--lengths 1024,2048,...,32768] [--no-peer]

One synthetic sample of T tokens (random ids, 16 prompt tokens, the rest supervised), trained
2 steps at TTT 3 through `eyas train`'s Trainer on the toy tiny target (online target,
hidden 96), each length in a fresh process. Extra peak memory = the process's peak RSS above
the same run at T = 256. Growth per doubling = extra(2T) / extra(T): linear memory gives 2,
quadratic 4. Goals: at most 2.2x per doubling, 8,192 tokens at most 6x the extra memory of
2,048, and 32k trains on this machine.

`--ac` instead compares activation checkpointing on and off at TTT 7 (`--ac-ttt`) for
`--ac-lengths`: the drafter steps' own peak resident memory per token (target states computed
first; VmHWM reset through /proc/self/clear_refs; glibc's mmap threshold fixed so RSS follows
the live tensors) and their CPU and wall time; the goal is at least 2x less memory. It writes
the `activation_checkpointing` section of the results file, keeping the rest. The length sweep
runs with activation checkpointing off, as it was measured before the flag existed.

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


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def child_eyas(length: int, ttt: int = 3, ac: str = "off", drafter_only: bool = False) -> dict:
    """Run in a fresh process: train one T-token sample for 2 steps; peak RSS and step time.

    `drafter_only`: the target's outputs are computed once before the steps, and the peak is
    the resident high-water mark (VmHWM, reset through /proc/self/clear_refs) above the
    resident size just before them: the drafter step's own memory, without the target
    forward's (eager attention, quadratic in T) or the imports'."""
    from eyas.toy.build import build_toy
    from eyas.train.config import TrainConfig
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
            ttt=ttt,
            activation_checkpointing=ac,
            draft_vocab=256,
            batch_tokens=length + 64,
            # past the tiny toy's 4,096 positions: RoPE extends, and memory is what is measured
            max_len=length + 16,
            warmup_steps=0,
            checkpoint_every=10_000,
        )
        trainer = Trainer(cfg, log=lambda s: None)
        trainer.setup()
        if drafter_only:
            import gc

            seqs, _ = trainer._batch_at(0)
            from eyas.train.loop import _collate

            ids, _ = _collate(seqs, trainer.device)
            outputs = trainer._target_outputs(ids, seqs)
            trainer._target_outputs = lambda ids, seqs: outputs
            gc.collect()
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
            before = _status_kb("VmRSS")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        hist = trainer.train()
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu_s = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
        peak = _status_kb("VmHWM") if drafter_only else 0
        trainer.cleanup()
    step_s = hist[-1].elapsed_s - hist[0].elapsed_s
    if drafter_only:
        return {
            "step_peak_mb": round((peak - before) / 1024, 1),
            "step_s": round(step_s, 2),
            "cpu_s": round(cpu_s, 2),
            "trained_positions": hist[-1].trained_positions,
        }
    return {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": round(step_s, 2),
        "trained_positions": hist[-1].trained_positions,
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


def compare_checkpointing(args: argparse.Namespace) -> None:
    """Peak RSS per trained token and step time at TTT `--ac-ttt`, AC on vs off, each run in
    a fresh process; per token = (peak RSS at T - peak RSS at T=256, same mode) / (T - 256)."""
    me = [sys.executable, str(Path(__file__).resolve())]
    ttt = ["--child-ttt", str(args.ac_ttt), "--child-drafter-only"]
    # A fixed mmap threshold: every tensor over 64 KiB is mapped and unmapped with its
    # lifetime, so the resident high-water mark follows the live tensors instead of glibc's
    # heap, which keeps freed memory resident once its dynamic threshold has grown.
    env = {"MALLOC_MMAP_THRESHOLD_": "65536"}
    load_before = os.getloadavg()
    rows, base = [], {}
    path = Path(args.json)

    def write(rows: list[dict]) -> None:  # after every length: a long run keeps what it measured
        out = json.loads(path.read_text()) if path.exists() else {"bench": "train_memory"}
        out["activation_checkpointing"] = _ac_section(args, base, rows, load_before)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2) + "\n")

    for mode in ("off", "on"):
        got = run_child(
            [*me, "--child", str(BASELINE), *ttt, "--child-ac", mode], args.timeout, env
        )
        if isinstance(got, str):
            raise SystemExit(f"baseline ({mode}) run {got}")
        base[mode] = got
    for t in [int(x) for x in args.ac_lengths.split(",")]:
        row: dict = {"tokens": t}
        for mode in ("off", "on"):
            got = run_child([*me, "--child", str(t), *ttt, "--child-ac", mode], args.timeout, env)
            if isinstance(got, dict):
                extra = got["step_peak_mb"] - base[mode]["step_peak_mb"]
                got["extra_mb"] = round(extra, 1)
                got["kb_per_token"] = round(extra * 1024 / (t - BASELINE), 2)
            row[mode] = got
            print(f"T={t} AC {mode}: {got}", flush=True)
        on, off = row["on"], row["off"]
        if isinstance(on, dict) and isinstance(off, dict):
            row["memory_reduction"] = round(off["kb_per_token"] / on["kb_per_token"], 2)
            row["step_time_ratio"] = round(on["step_s"] / max(off["step_s"], 1e-9), 2)
            row["cpu_time_ratio"] = round(on["cpu_s"] / max(off["cpu_s"], 1e-9), 2)
        rows.append(row)
        write(rows)
    print(f"\nTTT {args.ac_ttt}, toy tiny (hidden 96), one sample, CPU; peak RSS per token")
    print(f"{'T':>7}{'off KB/tok':>12}{'on KB/tok':>11}{'cut':>7}{'off step s':>12}"
          f"{'on step s':>11}{'time x':>8}{'CPU time x':>12}")  # fmt: skip
    for r in rows:
        on, off = r["on"], r["off"]
        if not (isinstance(on, dict) and isinstance(off, dict)):
            print(f"{r['tokens']:>7}  {off if isinstance(off, str) else on}")
            continue
        print(
            f"{r['tokens']:>7}{off['kb_per_token']:>12}{on['kb_per_token']:>11}"
            f"{r['memory_reduction']:>7}{off['step_s']:>12}{on['step_s']:>11}"
            f"{r['step_time_ratio']:>8}{r['cpu_time_ratio']:>12}"
        )


def _ac_section(args, base, rows, load_before) -> dict:
    return {
        "command": "python bench/bench_train_memory.py --ac "
        + " ".join(f"--ac-ttt {args.ac_ttt} --ac-lengths {args.ac_lengths}".split()),
        "measure": "peak resident memory (VmHWM) of the 2 training steps above the resident "
        "size before them, target outputs precomputed; minus the same at T=256, per token; "
        "CPU, fp32, toy tiny drafter (hidden 96, 3 heads x 32, MLP 256), draft vocab 256, "
        "one sample; MALLOC_MMAP_THRESHOLD_=65536 so RSS follows the live tensors",
        "step_s": "wall time of the second optimizer step (the machine is shared: see the load)",
        "cpu_s": "CPU seconds (user + system) of the process over both steps: the compute the "
        "recompute costs, less sensitive to other processes than wall time",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "ttt": args.ac_ttt,
        "baseline_tokens": BASELINE,
        "baseline": base,
        "rows": rows,
        "goal": {"memory_reduction_at_least": 2.0},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="1024,2048,4096,8192,16384,32768")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--peer-limit-gb", type=float, default=16)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--child-ttt", type=int, default=3, help=argparse.SUPPRESS)
    ap.add_argument("--child-ac", default="off", help=argparse.SUPPRESS)
    ap.add_argument("--child-drafter-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--ac",
        action="store_true",
        help="instead of the length sweep: activation checkpointing on vs off at --ac-ttt, "
        "for --ac-lengths (the result's `activation_checkpointing` section)",
    )
    ap.add_argument("--ac-ttt", type=int, default=7)
    ap.add_argument("--ac-lengths", default="2048,4096,8192")
    ap.add_argument("--json", default="bench/results/train_memory.json")
    args = ap.parse_args()
    if args.child:
        got = child_eyas(args.child, args.child_ttt, args.child_ac, args.child_drafter_only)
        print("RESULT " + json.dumps(got), flush=True)
        return
    if args.ac:
        compare_checkpointing(args)
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
