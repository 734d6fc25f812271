"""The client policy against a slow, busy server: wasted retries and throughput.

    .venv/bin/python bench/bench_client_policy.py [--requests 200] [--concurrency 64]

The fake SGLang computes `--capacity` requests at once, `--service-s` each, and queues the rest
(a busy GPU server, or vLLM on CPU, the way the issue saw it). At the full ceiling a request
waits ceiling / capacity x service-s, longer than the timeout, so:

- `total-timeout client` (the client eyas had: a fixed number in flight, each attempt cancelled
  after timeout_s and sent again from nothing) wastes retries and redoes the server's work;
- `eyas, fixed limit` keeps the ceiling in flight but times out only a server that shows no
  progress: no retries, the same queueing;
- `eyas, adaptive limit` also follows the throughput the server sustains: no retries, short
  queues (latency), the final limit near the server's capacity.

Prints a table and writes bench/results/client_policy.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from statistics import median

import aiohttp

from eyas.backends.base import BackendSettings, GenRequest
from eyas.backends.policy import RequestFailed
from eyas.backends.reasons import BackendError
from eyas.backends.registry import open_pool
from eyas.backends.sglang.client import SGLangBackend
from eyas.config import ServerConfig
from eyas.testing.server import fake_server

RESULTS = Path(__file__).parent / "results" / "client_policy.json"


def _requests(n: int) -> list[GenRequest]:
    return [
        GenRequest(id=f"r{i}", prompt_ids=[7, 11 + i, 13], max_new_tokens=16, sampling={})
        for i in range(n)
    ]


async def total_timeout_client(url: str, n: int, in_flight: int, timeout_s: float) -> dict:
    """The previous engine's loop: `in_flight` workers, each attempt bounded by timeout_s."""
    rng = random.Random(0)
    stats = {"retries": 0, "failed": 0, "latencies": [], "in_flight": []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        backend = SGLangBackend(url, session, [2])
        queue = iter(_requests(n))

        async def worker():
            for req in queue:
                start = time.perf_counter()
                for attempt in range(1, 6):
                    try:
                        gen = await asyncio.wait_for(backend.generate(req), timeout_s)
                        stats["in_flight"].append(gen.meta["latency_s"])
                        break
                    except (TimeoutError, BackendError):
                        if attempt == 5:
                            stats["failed"] += 1
                            break
                        stats["retries"] += 1
                        await asyncio.sleep(min(60.0, 2 ** (attempt - 1)) * (0.5 + rng.random()))
                stats["latencies"].append(time.perf_counter() - start)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
    return stats


async def eyas_client(url: str, n: int, server: ServerConfig) -> dict:
    stats = {"retries": 0, "failed": 0, "latencies": [], "in_flight": []}
    settings = BackendSettings(stop_token_ids=[2])
    async with open_pool("sglang", settings, server, operation="generate") as pool:

        async def one(req):
            start = time.perf_counter()
            try:
                gen, _ = await pool.call(lambda b: b.generate(req))
                stats["in_flight"].append(gen.meta["latency_s"])
            except RequestFailed:
                stats["failed"] += 1
            stats["latencies"].append(time.perf_counter() - start)

        await asyncio.gather(*(one(r) for r in _requests(n)))
        stats["retries"] = pool.retries
        server = pool.servers[0]
        stats["final_limit"] = server.limit.value
        stats["limit_history"] = server.limit.history
        stats["progress_source"] = server.progress_source
    return stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--capacity", type=int, default=4)
    ap.add_argument("--service-s", type=float, default=0.2)
    ap.add_argument("--timeout-s", type=float, default=1.0)
    args = ap.parse_args()
    fake = ("--capacity", str(args.capacity), "--service-s", str(args.service_s))
    rows = {}
    with fake_server("eyas.testing.fake_sglang", *fake) as srv:
        runs = {
            "total-timeout client": lambda: total_timeout_client(
                srv.url, args.requests, args.concurrency, args.timeout_s
            ),
            "eyas, fixed limit": lambda: eyas_client(
                srv.url,
                args.requests,
                ServerConfig(
                    urls=[srv.url],
                    concurrency=args.concurrency,
                    adaptive_concurrency=False,
                    timeout_s=args.timeout_s,
                ),
            ),
            "eyas, adaptive limit": lambda: eyas_client(
                srv.url,
                args.requests,
                ServerConfig(
                    urls=[srv.url], concurrency=args.concurrency, timeout_s=args.timeout_s
                ),
            ),
        }
        for name, run in runs.items():
            start = time.perf_counter()
            stats = asyncio.run(run())
            wall = time.perf_counter() - start
            lat = sorted(stats.pop("latencies"))
            sent = sorted(stats.pop("in_flight"))
            rows[name] = {
                **stats,
                "wall_s": round(wall, 2),
                "requests_per_s": round(args.requests / wall, 2),
                "latency_p50_s": round(median(lat), 3),
                "latency_max_s": round(lat[-1], 3),
                # from sending to the answer: how long the server held a request
                "in_flight_p50_s": round(median(sent), 3),
                "in_flight_max_s": round(sent[-1], 3),
            }
    ideal = args.capacity / args.service_s
    print(
        f"{args.requests} requests; server: {args.capacity} at once x {args.service_s} s "
        f"({ideal:.1f}/s at best); ceiling {args.concurrency} in flight; timeout {args.timeout_s} s"
    )
    print(
        f"{'client':22} {'req/s':>6} {'retries':>7} {'failed':>6} {'wait p50':>8} "
        f"{'at server p50/max':>17}  limit"
    )
    for name, r in rows.items():
        print(
            f"{name:22} {r['requests_per_s']:6.2f} {r['retries']:7d} {r['failed']:6d} "
            f"{r['latency_p50_s']:8.2f} {r['in_flight_p50_s']:8.2f}/{r['in_flight_max_s']:<8.2f} "
            f"{r.get('final_limit', '-')}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"settings": vars(args), "server_best_requests_per_s": ideal, "rows": rows}, indent=2
        )
        + "\n"
    )
    print(f"-> {RESULTS}")


if __name__ == "__main__":
    main()
