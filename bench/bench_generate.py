"""Client throughput of `eyas generate` against the fake SGLang server (zero latency).

    .venv/bin/python bench/bench_generate.py [--prompts 10000] [--concurrency 256]

10,000 prompts of ~500 tokens, outputs of ~500 tokens. Reports samples/s and the client's
CPU seconds per 1,000 samples (the server runs in its own process). Goal (issue 4): at least
1,500 samples/s on 2 cores, so the client is never what a GPU server waits for.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
from pathlib import Path

import orjson

from eyas.config import BackendConfig
from eyas.generate.run import DatasetPlan, GenerateOptions, run_generate
from eyas.render.renderer import Renderer
from eyas.testing.server import fake_sglang_server
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=10_000)
    ap.add_argument("--prompt-len", type=int, default=500)
    ap.add_argument("--output-len", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--batch-sizes", default="1,8", help="SGLang /generate batch sizes to run")
    ap.add_argument("--json", default="bench/results/generate.json")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = save_tokenizer(train_tokenizer(["hello world"] * 10, 300), tmp / "tok")
        renderer = Renderer(model_dir)
        prompts = tmp / "in.jsonl"
        with prompts.open("wb") as f:
            for i in range(args.prompts):
                ids = [rng.randrange(30, 4000) for _ in range(args.prompt_len)]
                f.write(
                    orjson.dumps(
                        {
                            "id": f"{i:08x}{rng.getrandbits(64):016x}",
                            "dataset": "bench",
                            "messages": [{"role": "user", "content": "x"}],
                            "tools": [],
                            "prompt_ids": ids,
                            "turn": -1,
                        }
                    )
                    + b"\n"
                )
        runs = []
        with fake_sglang_server("--fixed-len", str(args.output_len)) as url:
            for batch in [int(b) for b in args.batch_sizes.split(",")]:
                backend = BackendConfig(
                    kind="sglang", urls=[url], concurrency=args.concurrency, batch_size=batch
                )
                opts = GenerateOptions(
                    prompts,
                    tmp / f"out{batch}",
                    backend,
                    DatasetPlan(args.output_len + 10, {"temperature": 0.0}),
                    show_progress=False,
                )
                cpu0, t0 = _cpu(), time.perf_counter()
                manifest = run_generate(opts, renderer, model_dir)
                wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
                n = manifest["this_run"]["samples_written"]
                runs.append(
                    {
                        "batch_size": batch,
                        "samples": n,
                        "seconds": round(wall, 2),
                        "samples_per_s": round(n / wall, 1),
                        "output_tokens_per_s": round(
                            manifest["this_run"]["output_tokens"] / wall, 1
                        ),
                        "client_cpu_s_per_1000": round(1000 * cpu / max(1, n), 3),
                    }
                )
    out = {
        "bench": "generate_fake_sglang",
        "prompts": args.prompts,
        "prompt_len": args.prompt_len,
        "output_len": args.output_len,
        "concurrency": args.concurrency,
        "goal_samples_per_s": 1500,
        "runs": runs,
        "peer_comparison": "not run: speculators 0.9.0 regeneration needs a vLLM chat server "
        "with return_token_ids; see README",
    }
    cols = ("batch_size", "samples", "seconds", "samples_per_s", "client_cpu_s_per_1000")
    print("".join(f"{c:>22}" for c in cols))
    for r in runs:
        print("".join(f"{r[c]:>22}" for c in cols))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
