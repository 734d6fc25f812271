"""How many in-flight slots decode, at the old and the new batching and in-flight defaults.

    .venv/bin/python bench/bench_inflight.py [--slots 256] [--token-s 0.002] [--window-s 12]

SGLang answers a non-streaming batch when its longest member is done: the members that
finished earlier hold their client slot without decoding. Outputs here follow the fake
server's long-tailed latency model (`eyas.testing.fake_sglang`: lognormal lengths, median 470
tokens, sigma 1.2, cut at max_new_tokens; `--token-s` seconds a token). The server decodes at
most `--slots` sequences at once (a stand-in for one node's running batch, scaled down so that
the client fits on a small CPU); requests beyond that wait in its queue, held but not decoding.

For each setting the client (eyas's own `ServerPool` and SGLang backend) keeps the in-flight
ceiling full for `--warmup-s`, then the server's time integrals are read over `--window-s`:

- decoding fraction = integral of sequences decoding / integral of sequences held (received
  and not yet answered): the fraction of in-flight slots that decode, time-weighted;
- node use = integral of sequences decoding / (slots x window).

Prints a table and writes bench/results/inflight.json (with the command and the load).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import aiohttp

from eyas.backends.base import BackendSettings, GenRequest
from eyas.backends.registry import open_pool
from eyas.backends.sglang.options import SGLangOptions
from eyas.config import ServerConfig
from eyas.testing.server import fake_server

RESULTS = Path(__file__).parent / "results" / "inflight.json"
MEDIAN, SIGMA = 470.0, 1.2  # the fake server's defaults (its --length-median/--length-sigma)


def settings_to_run(slots: int, old_cap: int) -> list[dict]:
    """(label, batch_size, in flight): the old defaults, each change alone, the new ones,
    and a ceiling above what the server decodes at once."""
    return [
        {"label": "old: batch 8, old cap", "batch_size": 8, "in_flight": old_cap},
        {"label": "batch 8, node cap", "batch_size": 8, "in_flight": slots},
        {"label": "batch 1, old cap", "batch_size": 1, "in_flight": old_cap},
        {"label": "new: batch 1, node cap", "batch_size": 1, "in_flight": slots},
        {"label": "batch 1, 2x node cap", "batch_size": 1, "in_flight": 2 * slots},
    ]


def expected_fraction(batch: int, cap: int, draws: int = 200_000) -> float:
    """Monte Carlo of the length draw: mean length / mean longest of `batch` (the decoding
    fraction a batch answered at its longest member gives, queueing aside)."""
    rng = random.Random(0)
    lengths = [
        min(cap, max(1, round(rng.lognormvariate(math.log(MEDIAN), SIGMA)))) for _ in range(draws)
    ]
    groups = [lengths[i : i + batch] for i in range(0, draws - batch + 1, batch)]
    return sum(map(sum, groups)) / sum(batch * max(g) for g in groups)


def kv_arithmetic(max_new_tokens: int, draws: int = 200_000) -> dict:
    """Arithmetic, not a measurement: KV memory of the running requests on one 8 x H200 node
    serving Kimi-K2.5 with DP attention (each GPU holds the MLA latents of its own requests).
    Assumptions are named in the dict; the live context is the time-weighted mean over a
    request's life (a long request is running for longer): prompt + E[L^2] / (2 E[L])."""
    rng = random.Random(1)
    lengths = [
        min(max_new_tokens, max(1, round(rng.lognormvariate(math.log(MEDIAN), SIGMA))))
        for _ in range(draws)
    ]
    mean_out = sum(lengths) / draws
    grown = sum(n * n for n in lengths) / (2 * sum(lengths))
    a = {
        "layers": 61,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "kv_bytes": 2,  # bf16 KV cache
        "gpu_bytes": 141e9,  # H200
        "memory_fraction_assumed": 0.85,  # weights + KV cache share of each GPU
        "weights_bytes_assumed": 600e9,  # the INT4 checkpoint, spread over 8 GPUs
        "prompt_tokens_assumed": 500,  # ~1,500 tokens a sample less the mean output
    }
    per_token = (a["kv_lora_rank"] + a["qk_rope_head_dim"]) * a["layers"] * a["kv_bytes"]
    budget = a["gpu_bytes"] * a["memory_fraction_assumed"] - a["weights_bytes_assumed"] / 8
    live = a["prompt_tokens_assumed"] + grown
    per_request = live * per_token
    return {
        "assumptions": a,
        "mean_output_tokens": round(mean_out),
        "time_weighted_live_context_tokens": round(live),
        "kv_bytes_per_token": per_token,
        "kv_budget_per_gpu_gb": round(budget / 1e9, 1),
        "kv_per_request_mb": round(per_request / 1e6),
        "running_per_dp_rank": {
            str(n): {
                "kv_gb": round(n * per_request / 1e9, 1),
                "of_budget": round(n * per_request / budget, 2),
            }
            for n in (64, 128, 256)
        },
        "longest_output_kv_gb": round(
            (a["prompt_tokens_assumed"] + max_new_tokens) * per_token / 1e9, 2
        ),
    }


async def stats(session: aiohttp.ClientSession, url: str) -> dict:
    async with session.get(url + "/fake_stats") as r:
        return await r.json()


async def measure(url: str, run: dict, args: argparse.Namespace) -> dict:
    server = ServerConfig(
        urls=[url], concurrency=run["in_flight"], adaptive_concurrency=False, timeout_s=600
    )
    backend = BackendSettings(stop_token_ids=[2])
    options = SGLangOptions(batch_size=run["batch_size"])
    tag = f"{run['batch_size']}-{run['in_flight']}"
    requests = (
        GenRequest(
            id=f"{tag}-{i}",
            prompt_ids=[7, 100 + i % 3000, 13, 50 + i // 3000, run["batch_size"]],
            max_new_tokens=args.max_new_tokens,
            sampling={},
        )
        for i in range(10**7)
    )
    async with (
        aiohttp.ClientSession() as session,
        open_pool("sglang", backend, server, operation="generate", options=options) as pool,
    ):

        async def worker() -> None:
            for req in requests:
                await pool.call(lambda b, req=req: b.generate(req))

        filling = asyncio.create_task(pool.fill(worker, 10**7))
        await asyncio.sleep(args.warmup_s)
        before, start = await stats(session, url), time.perf_counter()
        await asyncio.sleep(args.window_s)
        after, wall = await stats(session, url), time.perf_counter() - start
        filling.cancel()
        await asyncio.gather(filling, return_exceptions=True)
    d = {k: after[k] - before[k] for k in ("held_s", "decoding_s", "tokens", "items")}
    return {
        **run,
        "decoding_fraction": round(d["decoding_s"] / d["held_s"], 3),
        "node_use": round(d["decoding_s"] / (args.slots * wall), 3),
        "mean_held": round(d["held_s"] / wall, 1),
        "output_tokens_per_s": round(d["tokens"] / wall),
        "answered": d["items"],
        "expected_fraction_no_queue": round(
            expected_fraction(run["batch_size"], args.max_new_tokens), 3
        ),
        "window_s": round(wall, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=256, help="sequences the server decodes at once")
    ap.add_argument("--old-cap", type=int, default=32, help="the old in-flight cap, same scale")
    ap.add_argument("--token-s", type=float, default=0.002)
    ap.add_argument("--max-new-tokens", type=int, default=8192)
    ap.add_argument("--warmup-s", type=float, default=4.0)
    ap.add_argument("--window-s", type=float, default=12.0)
    args = ap.parse_args()
    load_before = os.getloadavg()
    fake = ("--token-s", str(args.token_s), "--decode-slots", str(args.slots))
    rows = []
    for run in settings_to_run(args.slots, args.old_cap):
        with fake_server("eyas.testing.fake_sglang", *fake) as srv:
            rows.append(asyncio.run(measure(srv.url, run, args)))
        r = rows[-1]
        print(f"  {r['label']}: {r['decoding_fraction']}", file=sys.stderr, flush=True)
    head = (
        f"{'setting':26} {'batch':>5} {'in flight':>9} {'decoding':>8} {'expected':>8} "
        f"{'node use':>8} {'tokens/s':>8} {'answered':>8}"
    )
    print(
        f"lognormal outputs (median {MEDIAN:g}, sigma {SIGMA}, cut at {args.max_new_tokens}); "
        f"server: {args.slots} decoding at once, {args.token_s * 1000:g} ms a token; "
        f"{args.window_s:g} s windows"
    )
    print(head)
    for r in rows:
        print(
            f"{r['label']:26} {r['batch_size']:5d} {r['in_flight']:9d} {r['decoding_fraction']:8.3f} "
            f"{r['expected_fraction_no_queue']:8.3f} {r['node_use']:8.3f} "
            f"{r['output_tokens_per_s']:8d} {r['answered']:8d}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "command": " ".join(["python", *sys.argv]),
                "date": time.strftime("%Y-%m-%d", time.gmtime()),
                "load_average_before": [round(x, 2) for x in load_before],
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "settings": {**vars(args), "length_median": MEDIAN, "length_sigma": SIGMA},
                "rows": rows,
                "kv_arithmetic_kimi_node": kv_arithmetic(args.max_new_tokens),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"-> {RESULTS}")


if __name__ == "__main__":
    main()
