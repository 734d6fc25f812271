"""Full audit over 100,000 synthetic samples (~100M tokens) written as eyas Parquet shards.

    .venv/bin/python bench/bench_audit.py [--samples 100000] [--tokens-per-sample 1000]

Prints wall time, CPU time and tokens/s and writes JSON (with the load average: on a shared
machine the wall time measures the other jobs too). Goal: at most 60 s on 2 idle cores.
Checks that decode or re-render sample 2,000 per dataset and say so in their findings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from eyas.audit import AuditOptions, run_audit
from eyas.store import SCHEMA
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer


def _shard(rng, n, start, prompt_len, output_len, vocab, stop_id, datasets) -> pa.Table:
    def ragged(lengths):
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        values = rng.integers(30, vocab, size=int(offsets[-1]), dtype=np.int32)
        return offsets, values

    p_len = rng.integers(prompt_len // 2, prompt_len * 3 // 2, size=n)
    o_len = rng.integers(output_len // 2, output_len * 3 // 2, size=n)
    p_off, p_val = ragged(p_len)
    o_off, o_val = ragged(o_len)
    o_val[o_off[1:] - 1] = stop_id  # every output ends on the stop token
    msgs = orjson.dumps([{"role": "user", "content": "hello"}]).decode()
    sampling = orjson.dumps({"temperature": 0.0, "max_new_tokens": output_len * 2}).decode()
    cols = {
        "id": [f"{start + i:032x}" for i in range(n)],
        "dataset": [datasets[(start + i) % len(datasets)] for i in range(n)],
        "turn": pa.array(np.ones(n, dtype=np.int32)),
        "prompt_ids": pa.ListArray.from_arrays(pa.array(p_off), pa.array(p_val)),
        "output_ids": pa.ListArray.from_arrays(pa.array(o_off), pa.array(o_val)),
        "loss_mask": pa.nulls(n, type=pa.list_(pa.int8())),
        "finish_reason": ["stop"] * n,
        "matched_stop": [str(stop_id)] * n,
        "messages": [msgs] * n,
        "tools": ["[]"] * n,
        "backend": ["sglang"] * n,
        "sampling": [sampling] * n,
        "attempts": pa.array(np.ones(n, dtype=np.int32)),
        "latency_s": pa.array(np.zeros(n)),
    }
    return pa.table(cols, schema=SCHEMA)


def speed(samples: int = 100_000, tokens_per_sample: int = 1000) -> dict:
    """Audit `samples` synthetic samples (Parquet shards, a toy Kimi tokenizer) and time it."""
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = [str(r) for f in FAMILIES for r in family_rows(f, 30)]
        model_dir = save_tokenizer(train_tokenizer(corpus, 4096), tmp / "model")
        stop = json.loads((model_dir / "tokenizer.json").read_text())
        stop_id = next(t["id"] for t in stop["added_tokens"] if t["content"] == "<|im_end|>")
        stage = tmp / "generate"
        stage.mkdir()
        datasets = [f.name for f in FAMILIES]
        half = tokens_per_sample // 2
        per_shard = 10_000
        for k, start in enumerate(range(0, samples, per_shard)):
            n = min(per_shard, samples - start)
            pq.write_table(
                _shard(rng, n, start, half, half, 4000, stop_id, datasets),
                stage / f"part-{k:05d}.parquet",
            )
        t0, cpu0 = time.perf_counter(), time.process_time()
        result = run_audit(stage, model_dir, AuditOptions(max_len=tokens_per_sample * 4))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    tokens = int(result.table.prompt.offsets[-1] + result.table.output.offsets[-1])
    return {
        "samples": len(result.table),
        "tokens": tokens,
        "seconds": round(wall, 2),
        "tokens_per_s": round(tokens / wall),
        # CPU seconds of this process (all its threads): what the audit costs, less sensitive
        # than the wall time to other jobs sharing the machine
        "cpu_seconds": round(cpu, 2),
        "findings": len(result.findings),
        "decode_sample_per_dataset": 2000,
        "goal_seconds": 60,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--tokens-per-sample", type=int, default=1000)
    ap.add_argument("--json", default="bench/results/audit.json")
    args = ap.parse_args()
    load_start = os.getloadavg()
    out = {
        "bench": "audit",
        "command": "bench/bench_audit.py " + " ".join(sys.argv[1:]),
        **speed(args.samples, args.tokens_per_sample),
        "load_average": {"start": load_start, "end": os.getloadavg()},
        "cpu_count": os.cpu_count(),
    }
    print(f"{'metric':<28}{'value':>16}")
    for k in ("samples", "tokens", "seconds", "cpu_seconds", "tokens_per_s", "findings"):
        print(f"{k:<28}{out[k]:>16}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
