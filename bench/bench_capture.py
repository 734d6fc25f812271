"""Capture throughput through the real vLLM (CPU) against vLLM's own prefill on the same
sequences, in the same run; plus bytes per token stored.

    .venv/bin/python bench/bench_capture.py [--samples 256] [--seq-len 1024]

Rows, all on the toy tiny target, bf16 engine:
- `eyas capture --backend vllm`: a server with hidden-state extraction and the eyas connector;
  eyas sends each sample, reads the states and commits safetensors shards;
- the extraction server answering the same requests with nobody reading the states: the
  engine's own cost of extraction;
- vLLM server, no extraction: the same requests (prompt = the sequence, one new token) against
  a plain server, so the extraction's own cost shows;
- vLLM `LLM.generate` offline, prefill only (max_tokens 1): the engine's limit here.
Goal: eyas capture at 0.8x the offline prefill or better. Each row is the median of
`--repeats` runs on one engine; server start-up and model load are not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import shutil
import tempfile
import time
from pathlib import Path
from statistics import median

import aiohttp
import orjson
from peers import vllm_offline, vllm_python

from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.capture.config import CaptureConfig
from eyas.capture.result import CaptureResult
from eyas.capture.run import capture_layers, run_capture
from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.build import build_toy
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample

NO_PREFIX_CACHING = ("--no-enable-prefix-caching",)


def _samples(toy: Path, n: int, seq_len: int, out: Path) -> list[list[int]]:
    """`n` samples of about `seq_len` tokens: toy conversations' reference samples (prompt and
    completion) laid end to end, the last one's completion supervised."""
    renderer = Renderer(toy)
    pool = []
    for fam in FAMILIES:
        pool += [
            reference_sample(renderer, c)
            for c in convert_rows(family_rows(fam, 64, seed=4242), fam.format, fam.name)
            if hasattr(c, "messages")
        ]
    rows, k = [], 0
    for i in range(n):
        prefix: list[int] = []
        while True:
            s = copy.deepcopy(pool[k % len(pool)])
            k += 1
            if len(prefix) + len(s.prompt_ids) + len(s.output_ids) >= seq_len:
                break
            prefix += s.prompt_ids + s.output_ids
        s.prompt_ids = prefix + s.prompt_ids
        s.id = f"{i:06d}{s.id[6:]}"
        rows.append(s)
    out.write_text("\n".join(json.dumps(s.to_dict()) for s in rows) + "\n")
    return [s.prompt_ids + s.output_ids for s in rows]


async def _plain_prefill(url: str, seqs: list[list[int]], concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)
    async with aiohttp.ClientSession() as session:

        async def one(ids):
            async with sem:
                body = {"model": "target", "prompt": ids, "max_tokens": 1, "temperature": 0.0}
                async with session.post(
                    url + "/v1/completions",
                    data=orjson.dumps(body),
                    headers={"Content-Type": "application/json"},
                ) as r:
                    r.raise_for_status()
                    await r.read()

        await one(seqs[0])  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(one(s) for s in seqs))
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--seq-len", type=int, default=1024, help="tokens per sample, about")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per row (median)")
    ap.add_argument("--json", default="bench/results/capture.json")
    args = ap.parse_args()
    python = vllm_python()
    toy = build_toy("tiny")
    layers, target = capture_layers(toy, None)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        seqs = _samples(toy, args.samples, args.seq_len, tmp / "samples.jsonl")
        tokens = sum(len(s) for s in seqs)
        rows = []

        storage = tmp / "incoming"  # as eyas does by default: OUT/.incoming
        storage.mkdir()
        launch = VLLMServer.capture_launch(layers, storage)
        options = VLLMOptions(python=python, max_model_len=4096)
        with VLLMServer(
            options, target, args=launch.args, env=launch.env, log_path=tmp / "capture.log"
        ) as started:
            url = started.url
            warm = CaptureConfig(
                target=toy,
                data=tmp / "samples.jsonl",
                out=tmp / "warm",
                backend="vllm",
                urls=[url],
                storage_dir=storage,
                limit=1,
            )
            run_capture(warm, log=lambda _: None)
            walls = []
            for k in range(args.repeats):
                cfg = CaptureConfig(
                    target=toy,
                    data=tmp / "samples.jsonl",
                    out=tmp / f"cap{k}",
                    backend="vllm",
                    urls=[url],
                    storage_dir=storage,
                    concurrency=args.concurrency,
                )
                t0 = time.perf_counter()
                manifest = run_capture(cfg, log=lambda _: None)
                walls.append(time.perf_counter() - t0)
                assert isinstance(manifest, CaptureResult), manifest
                assert manifest.counts.samples == len(seqs), manifest.counts
            # The same server answering without anyone reading the states: the engine's own
            # cost of extraction, apart from eyas's client.
            bare = []
            for _ in range(args.repeats):
                bare.append(asyncio.run(_plain_prefill(url, seqs, args.concurrency)))
                shutil.rmtree(storage, ignore_errors=True)
                storage.mkdir(exist_ok=True)
        wall = median(walls)
        stored = sum(p.stat().st_size for p in (tmp / "cap0").rglob("*.safetensors"))
        rows.append(
            {
                "row": "eyas capture --backend vllm",
                "seconds": round(wall, 2),
                "runs": [round(w, 2) for w in walls],
                "tokens_per_s": round(tokens / wall),
                "bytes_per_token": manifest.bytes_per_token,
                "stored_bytes_per_token": round(stored / tokens),
            }
        )
        rows.append(
            {
                "row": "vLLM extraction server, states unread",
                "seconds": round(median(bare), 2),
                "runs": [round(w, 2) for w in bare],
                "tokens_per_s": round(tokens / median(bare)),
            }
        )
        # the same server without extraction, prefix caching off as the capture server has it
        plain = VLLMOptions(python=python, max_model_len=4096, args=list(NO_PREFIX_CACHING))
        with VLLMServer(plain, target, log_path=tmp / "plain.log") as started:
            url = started.url
            walls = [
                asyncio.run(_plain_prefill(url, seqs, args.concurrency))
                for _ in range(args.repeats)
            ]
        wall = median(walls)
        rows.append(
            {
                "row": "vLLM server, no extraction",
                "seconds": round(wall, 2),
                "runs": [round(w, 2) for w in walls],
                "tokens_per_s": round(tokens / wall),
            }
        )
        off = vllm_offline(
            {
                "model": str(toy),
                "prompts": seqs,
                "max_tokens": 1,
                "dtype": "auto",
                "max_model_len": 4096,
                "enable_prefix_caching": False,
                "repeats": args.repeats,
            },
            tmp,
        )
        rows.append(
            {
                "row": "vLLM LLM.generate (offline prefill)",
                "seconds": round(off["seconds"], 2),
                "runs": [round(w, 2) for w in off["runs"]],
                "tokens_per_s": round(tokens / off["seconds"]),
            }
        )
    limit = rows[-1]["tokens_per_s"]
    for r in rows:
        r["ratio_vs_offline"] = round(r["tokens_per_s"] / limit, 2)
    out = {
        "bench": "capture",
        "samples": len(seqs),
        "tokens": tokens,
        "layers": layers,
        "goal_ratio": 0.8,
        "rows": rows,
    }
    print(f"{len(seqs)} sequences, {tokens:,} tokens, layers {layers}")
    print(f"{'row':<40}{'seconds':>10}{'tokens/s':>12}{'ratio':>8}")
    for r in rows:
        print(f"{r['row']:<40}{r['seconds']:>10}{r['tokens_per_s']:>12,}{r['ratio_vs_offline']:>8}")
    print(
        f"bytes/token: {rows[0]['bytes_per_token']:,} (stored, with ids and masks: "
        f"{rows[0]['stored_bytes_per_token']:,})"
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
