"""Streamed capture against a capture-engine stand-in: does `--capture-ahead` keep training fed?

    .venv/bin/python bench/bench_stream.py [--steps 16] [--warmup 2] [--ahead 4] [--rate-x 2]

Two runs on the toy target, same samples, batches and drafter:
- on disk: `eyas train --hidden-states` on an `eyas capture` (float32, the dtype the streamed
  spool holds on CPU) of the samples, made before the run.
- streamed: `eyas train --capture-ahead N`, its producer asking a stand-in engine that returns
  random states of the right shape ([T, layers, hidden]) after `tokens / rate` seconds, the
  rate shared by every request in flight, like one engine of that throughput. The rate is
  `--rate-x` times the on-disk run's own training rate (tokens/s), i.e. an engine faster than
  training, as a capture fleet sized for the node would be.
The stand-in's rate counts every token (prompts too: an engine computes them all), so it is set
against training's all-token rate; the table's tokens/s are supervised tokens. Throughput is
supervised tokens per second over the steps after `--warmup` (the producer's
head start and the first steps are not timed). Done when: streamed >= 0.9x on disk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_train import samples, timed

import eyas.backends.registry as registry
from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.toy.build import build_toy
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer


class StandIn:
    """A capture engine of `rate` tokens/s: requests queue on one clock, each answered with
    random states once its tokens have been 'computed'."""

    def __init__(self, rate: float, layers: int, hidden: int):
        self.rate, self.layers, self.hidden = rate, layers, hidden
        self.free_at = 0.0
        self.tokens = 0
        self.block = torch.zeros(0, layers, hidden)

    async def call(self, fn, work=None):
        return await fn(self), 1

    async def capture(self, sample_id: str, ids: list[int]):
        now = time.perf_counter()
        self.free_at = max(now, self.free_at) + len(ids) / self.rate
        await asyncio.sleep(self.free_at - now)
        self.tokens += len(ids)
        if len(ids) > len(self.block):  # random states, made once: the engine's compute is
            self.block = torch.randn(len(ids), self.layers, self.hidden)  # not on this machine
        return self.block[: len(ids)].clone()

    def describe(self) -> dict:
        return {"stand_in_tokens": self.tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ahead", type=int, default=4)
    ap.add_argument("--rate-x", type=float, default=2.0, help="stand-in rate / training rate")
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--json", default="bench/results/stream.json")
    args = ap.parse_args()
    load_start = os.getloadavg()
    uptime_start = os.popen("uptime").read().strip()
    model_dir = build_toy("tiny")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "s.jsonl"
        samples(model_dir, data)
        captured = Path(tmp) / "capture"
        run_capture(
            CaptureConfig(target=model_dir, data=data, out=captured, dtype="float32"),
            log=lambda s: None,
        )

        def cfg(name: str, **kw) -> TrainConfig:
            base = dict(
                target=model_dir,
                out=Path(tmp) / name,
                steps=args.steps,
                ttt=args.ttt,
                draft_vocab=512,
                batch_tokens=args.batch_tokens,
                warmup_steps=2,
                checkpoint_every=10_000,
                log_to=["none"],
            )
            return TrainConfig(**{**base, **kw})

        disk = Trainer(cfg("disk", hidden_states=captured), log=lambda s: None)
        disk.setup()
        disk_s, disk_tokens = timed(disk.train(), args.warmup)
        disk_rate = disk_tokens / disk_s
        # the engine computes every token (prompts too): its rate is against all tokens
        timed_positions = range(args.warmup, args.steps)
        all_tokens = sum(int(disk.plan.lengths[disk.plan.batch(p)].sum()) for p in timed_positions)
        train_all_rate = all_tokens / disk_s

        streamed = Trainer(cfg("streamed", data=data, capture_ahead=args.ahead), lambda s: None)
        # the captured layers: the fused ones and the last
        layers, hidden = len(disk.target.aux_layers) + 1, disk.tmodel.hidden_size
        engine = StandIn(args.rate_x * train_all_rate, layers, hidden)

        @contextlib.asynccontextmanager
        async def stand_in_pool(*a, **kw):
            yield engine

        real_open = registry.open_pool
        registry.open_pool = stand_in_pool  # _start_stream opens its pool through here
        try:
            streamed.setup()  # the producer starts here, ahead of the first step
            assert len(streamed.stream_layers) == layers
            stream_s, stream_tokens = timed(streamed.train(), args.warmup)
            waited = streamed.stream.wait_s
            peak = streamed.stream.peak_shards
            streamed.cleanup()
        finally:
            registry.open_pool = real_open
        stream_rate = stream_tokens / stream_s
    ratio = stream_rate / disk_rate
    row = {
        "steps": args.steps,
        "timed_steps": args.steps - args.warmup,
        "ttt": args.ttt,
        "ahead": args.ahead,
        "on_disk_tokens_per_s": round(disk_rate, 1),
        "training_all_tokens_per_s": round(train_all_rate, 1),
        "stand_in_tokens_per_s": round(args.rate_x * train_all_rate, 1),
        "streamed_tokens_per_s": round(stream_rate, 1),
        "ratio": round(ratio, 3),
        "trainer_wait_s": round(waited, 3),
        "peak_spool_shards": peak,
    }
    print("| path | tokens/s | vs on disk |\n|---|---|---|")
    print(f"| on disk (--hidden-states) | {row['on_disk_tokens_per_s']} | 1.00x |")
    print(
        f"| streamed (--capture-ahead {args.ahead}, stand-in at "
        f"{row['stand_in_tokens_per_s']} tok/s) | {row['streamed_tokens_per_s']} | {ratio:.2f}x |"
    )
    print(f"trainer waited {waited:.2f} s for shards; peak spool {peak} shards")
    Path(args.json).write_text(
        json.dumps(
            {
                "command": " ".join(["bench/bench_stream.py", *sys.argv[1:]]),
                "load_average": {"start": load_start, "end": os.getloadavg()},
                "uptime": uptime_start,
                "done_when": "streamed >= 0.9x on disk",
                "met": ratio >= 0.9,
                "rows": [row],
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
