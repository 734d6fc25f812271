"""Client throughput of `eyas generate` against the fake SGLang server (zero latency), and of
speculators 0.9.0 `regenerate-responses` against the same server's chat endpoint; then the
real engine: `eyas generate` through vLLM on CPU against vLLM's own offline `LLM.generate` on
the same prompt ids (the engine's limit; goal: eyas at 0.9x or better) and speculators against
the same server (`real_engine`).

    .venv/bin/python bench/bench_generate.py [--prompts 10000] [--concurrency 256] [--no-peer]

10,000 prompts of 500 tokens, outputs of 500 tokens. Reports samples/s and the client's CPU
seconds per 1,000 samples (the server runs in its own process). Goal (issue 4): at least 1,500
samples/s on 2 cores, so the client is never what a GPU server waits for.

The peer runs in its own venv (tools/speculators_env.sh; it pins transformers <= 5.19) with
the same prompts as chat messages (word `wN` = token N in the fake's chat rendering, so the
server-side prompts are the same 500 ids), `return_token_ids`, the same concurrency and output
length. Its samples/s comes from its own "Pipeline complete in X s" line (after its imports
and tokenizer load, like eyas's figure); its CPU figure includes process start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from statistics import median

import orjson
from peers import speculators_venv

from eyas.config import ModelConfig
from eyas.generate.config import BackendConfig, GenerateConfig, PipelineConfig
from eyas.generate.run import run_generate
from eyas.render.renderer import Renderer
from eyas.testing.server import fake_sglang_server
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bench_tokenizer(out: Path) -> Path:
    """A 4,200-token BPE, so every id the fake server returns decodes to real text (the peer
    detokenizes each sample)."""
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    corpus = [
        " ".join("".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(200))
        for _ in range(400)
    ]
    return save_tokenizer(train_tokenizer(corpus, 4200), out)


def _regenerate(
    endpoint: str,
    model: Path,
    dataset: Path,
    limit: int,
    concurrency: int,
    max_tokens: int,
    outfile: Path,
) -> subprocess.CompletedProcess:
    """speculators 0.9.0 `regenerate-responses` in its own venv."""
    return subprocess.run(
        [
            str(speculators_venv() / "bin" / "python"),
            "-m",
            "speculators",
            "regenerate-responses",
            "--endpoint",
            endpoint,
            "--model",
            str(model),
            "--dataset",
            str(dataset),
            "--limit",
            str(limit),
            "--concurrency",
            str(concurrency),
            "--max-tokens",
            str(max_tokens),
            "--outfile",
            str(outfile),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )


def run_speculators(url: str, prompts: Path, model_dir: Path, args, tmp: Path) -> dict:
    chat = tmp / "chat.jsonl"
    with prompts.open("rb") as src, chat.open("wb") as dst:
        for line in src:
            row = orjson.loads(line)
            words = " ".join(f"w{t}" for t in row["prompt_ids"][: args.prompt_len - 2])
            dst.write(
                orjson.dumps({"id": row["id"], "messages": [{"role": "user", "content": words}]})
                + b"\n"
            )
    out = tmp / "peer.jsonl"
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = _regenerate(
        url + "/v1/chat/completions",
        model_dir,
        chat,
        args.prompts,
        args.concurrency,
        args.output_len + 10,
        out,
    )
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"speculators failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    done = re.search(
        r"Pipeline complete in ([0-9.]+)s: (\d+) conversations \((\d+) ok", proc.stdout
    )
    if done is None:
        raise SystemExit(f"no summary line in speculators output:\n{proc.stdout[-2000:]}")
    seconds, ok = float(done.group(1)), int(done.group(3))
    rows = sum(1 for _ in out.open("rb"))
    return {
        "tool": "speculators 0.9.0 regenerate-responses (chat endpoint, return_token_ids)",
        "samples": rows,
        "conversations_ok": ok,
        "seconds": seconds,
        "seconds_incl_startup": round(total, 2),
        "samples_per_s": round(rows / seconds, 1),
        "client_cpu_s_per_1000_incl_startup": round(1000 * (_children_cpu() - cpu0) / rows, 3),
    }


def real_engine(args, tmp: Path) -> dict:
    """`eyas generate` through vLLM on CPU, vLLM's offline `LLM.generate` on the same prompt ids
    (the engine's limit here) and speculators' `regenerate-responses` against the same server.

    Prompts: the toy chat families (no tools, so a chat request renders to the same ids),
    rendered by eyas for the toy tiny target; greedy, at most `--real-max-new` new tokens."""
    from peers import vllm_offline, vllm_python

    from eyas.backends.vllm.options import VLLMOptions
    from eyas.backends.vllm.server import VLLMServer
    from eyas.hf_models import target_model
    from eyas.render.run import render_file
    from eyas.sources import convert_rows
    from eyas.toy.build import build_toy
    from eyas.toy.datasets import FAMILIES, family_rows

    toy = build_toy("tiny")
    renderer = Renderer(toy)
    chat = [f for f in FAMILIES if f.kind == "chat"]
    per = -(-args.real_prompts // len(chat)) + 8
    convs = [
        c
        for f in chat
        for c in convert_rows(family_rows(f, per, seed=777), f.format, f.name)
        if hasattr(c, "messages")
    ][: args.real_prompts]
    converted, rendered = tmp / "real_conv.jsonl", tmp / "real_rendered.jsonl"
    converted.write_text("\n".join(json.dumps(c.to_dict()) for c in convs) + "\n")
    render_file(renderer, converted, rendered)
    rows = [orjson.loads(line) for line in rendered.read_bytes().splitlines()]
    prompt_ids = [r["prompt_ids"] for r in rows]
    server = VLLMOptions(python=vllm_python(), max_model_len=4096, args=["--enable-scale-out"])
    out: dict = {"prompts": len(rows), "max_new_tokens": args.real_max_new, "rows": []}

    def eyas_row(name: str, cfg: PipelineConfig) -> dict:
        walls, run = [], {}
        for k in range(args.real_repeats):
            cfg_k = cfg.model_copy(
                update={"generate": cfg.generate.model_copy(update={"out": tmp / f"{name}{k}"})}
            )
            t0 = time.perf_counter()
            run = run_generate(cfg_k, renderer, show_progress=False).this_run
            walls.append(time.perf_counter() - t0)
        return _row(name, walls, run.samples_written, run.output_tokens)

    # served under its path: speculators sends the tokenizer path as the model name
    with VLLMServer(
        server, target_model(toy), log_path=tmp / "real_server.log", served_name=str(toy)
    ) as started:
        url = started.url
        backend = BackendConfig(kind="vllm", urls=[url], concurrency=args.real_concurrency)
        cfg = PipelineConfig(
            model=ModelConfig(dir=toy),
            backend=backend,
            generate=GenerateConfig(max_new_tokens=args.real_max_new, input=rendered),
        )
        eyas_row(
            "warm-up",
            cfg.model_copy(
                update={"generate": cfg.generate.model_copy(update={"max_new_tokens": 8})}
            ),
        )
        out["rows"].append(eyas_row("eyas generate --backend vllm", cfg))
        tokens = PipelineConfig(**{**dict(cfg), "engine": {"kind": "vllm", "endpoint": "generate"}})
        out["rows"].append(eyas_row("eyas, /inference/v1/generate", tokens))
        stops = renderer.stop_token_ids()
        walls, produced = [], 0
        for _ in range(args.real_repeats):
            wall, produced = asyncio.run(
                _bare_client(
                    url, str(toy), prompt_ids, args.real_max_new, stops, args.real_concurrency
                )
            )
            walls.append(wall)
        out["rows"].append(_row("bare HTTP client (no eyas)", walls, len(prompt_ids), produced))
        if not args.no_peer:
            out["rows"].append(_speculators_real(url, convs, toy, args, tmp))
    off = vllm_offline(
        {
            "model": str(toy),
            "prompts": prompt_ids,
            "max_tokens": args.real_max_new,
            "stop_token_ids": renderer.stop_token_ids(),
            "max_model_len": 4096,
            "repeats": args.real_repeats,
        },
        tmp,
    )
    out["rows"].append(
        _row("vLLM LLM.generate (offline)", off["runs"], off["prompts"], off["output_tokens"])
    )
    limit = out["rows"][-1]["output_tokens_per_s"]
    for r in out["rows"]:
        r["ratio_vs_offline"] = round(r["output_tokens_per_s"] / limit, 2)
    return out


async def _bare_client(url: str, model: str, prompts, max_new: int, stop_ids, concurrency: int):
    """The same requests eyas sends (token-id prompts, greedy, stop ids), from a minimal
    aiohttp client that keeps nothing: what the server allows over HTTP."""
    import aiohttp

    sem = asyncio.Semaphore(concurrency)
    tokens = 0
    async with aiohttp.ClientSession() as session:

        async def one(ids):
            nonlocal tokens
            body = {
                "model": model,
                "prompt": ids,
                "max_tokens": max_new,
                "temperature": 0.0,
                "stop_token_ids": stop_ids,
                "skip_special_tokens": False,
                "return_token_ids": True,
            }
            async with (
                sem,
                session.post(
                    url + "/v1/completions",
                    data=orjson.dumps(body),
                    headers={"Content-Type": "application/json"},
                ) as r,
            ):
                r.raise_for_status()
                tokens += len(orjson.loads(await r.read())["choices"][0]["token_ids"])

        t0 = time.perf_counter()
        await asyncio.gather(*(one(ids) for ids in prompts))
        return time.perf_counter() - t0, tokens


def _row(name: str, walls: list[float], samples: int, tokens: int) -> dict:
    """A timed row: the median of the repeats."""
    wall = median(walls)
    return {
        "row": name,
        "seconds": round(wall, 2),
        "runs": [round(w, 2) for w in walls],
        "samples": samples,
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / wall, 1),
    }


def _speculators_real(url: str, convs, toy: Path, args, tmp: Path) -> dict:
    chat = tmp / "real_chat.jsonl"
    with chat.open("w") as f:
        for c in convs:
            last_user = max(i for i, m in enumerate(c.messages) if m["role"] == "user")
            messages = [
                {"role": m["role"], "content": m["content"]} for m in c.messages[: last_user + 1]
            ]
            f.write(json.dumps({"id": c.id, "messages": messages}) + "\n")
    outfile = tmp / "real_peer.jsonl"
    proc = _regenerate(
        url + "/v1/chat/completions",
        toy,
        chat,
        len(convs),
        args.real_concurrency,
        args.real_max_new,
        outfile,
    )
    done = re.search(r"Pipeline complete in ([0-9.]+)s: (\d+) conversations", proc.stdout)
    if proc.returncode != 0 or done is None:
        return {
            "row": "speculators regenerate-responses",
            "error": (proc.stderr or proc.stdout)[-300:],
        }
    seconds = float(done.group(1))
    tokens = 0
    for line in outfile.read_bytes().splitlines():
        row = orjson.loads(line)
        tokens += sum(row.get("loss_mask") or [])  # its completion tokens
    return {
        "row": "speculators regenerate-responses",
        "seconds": seconds,
        "samples": int(done.group(2)),
        "output_tokens": tokens,
        "output_tokens_per_s": round(tokens / seconds, 1),
    }


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=10_000)
    ap.add_argument("--prompt-len", type=int, default=500)
    ap.add_argument("--output-len", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--batch-sizes", default="1,8", help="SGLang /generate batch sizes to run")
    ap.add_argument("--no-peer", action="store_true", help="skip speculators")
    ap.add_argument("--no-real-engine", action="store_true", help="skip the vLLM-on-CPU rows")
    ap.add_argument("--real-prompts", type=int, default=1024)
    ap.add_argument("--real-max-new", type=int, default=128)
    ap.add_argument("--real-concurrency", type=int, default=256)
    ap.add_argument("--real-repeats", type=int, default=3, help="timed runs per row (median)")
    ap.add_argument("--json", default="bench/results/generate.json")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = bench_tokenizer(tmp / "tok")
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
                backend = BackendConfig(kind="sglang", urls=[url], concurrency=args.concurrency)
                cfg = PipelineConfig(
                    model=ModelConfig(dir=model_dir),
                    backend=backend,
                    engine={"kind": "sglang", "batch_size": batch},
                    generate=GenerateConfig(
                        max_new_tokens=args.output_len + 10,
                        input=prompts,
                        out=tmp / f"out{batch}",
                    ),
                )
                cpu0, t0 = _cpu(), time.perf_counter()
                manifest = run_generate(cfg, renderer, show_progress=False)
                wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
                n = manifest.this_run.samples_written
                runs.append(
                    {
                        "batch_size": batch,
                        "samples": n,
                        "seconds": round(wall, 2),
                        "samples_per_s": round(n / wall, 1),
                        "output_tokens_per_s": round(manifest.this_run.output_tokens / wall, 1),
                        "client_cpu_s_per_1000": round(1000 * cpu / max(1, n), 3),
                    }
                )
            peer = None if args.no_peer else run_speculators(url, prompts, model_dir, args, tmp)
        real = None if args.no_real_engine else real_engine(args, tmp)
    out = {
        "bench": "generate_fake_sglang",
        "prompts": args.prompts,
        "prompt_len": args.prompt_len,
        "output_len": args.output_len,
        "concurrency": args.concurrency,
        "goal_samples_per_s": 1500,
        "runs": runs,
        "peer": peer,
        "real_engine": real,
    }
    if peer:
        for r in runs:
            r["ratio_vs_speculators"] = round(r["samples_per_s"] / peer["samples_per_s"], 2)
    cols = ("batch_size", "samples", "seconds", "samples_per_s", "client_cpu_s_per_1000")
    print(f"{'client':<28}" + "".join(f"{c:>22}" for c in (*cols[1:], "ratio")))
    for r in runs:
        name = f"eyas sglang batch {r['batch_size']}"
        print(
            f"{name:<28}"
            + "".join(f"{r[c]:>22}" for c in cols[1:])
            + f"{r.get('ratio_vs_speculators', '-'):>22}"
        )
    if peer:
        print(
            f"{'speculators chat':<28}{peer['samples']:>22}{peer['seconds']:>22}"
            f"{peer['samples_per_s']:>22}{peer['client_cpu_s_per_1000_incl_startup']:>22}{1.0:>22}"
        )
    if real:
        print(
            f"\nreal engine: vLLM on CPU, toy tiny, {real['prompts']} prompts, greedy, "
            f"<= {real['max_new_tokens']} new tokens"
        )
        print(f"{'row':<40}{'seconds':>10}{'samples':>9}{'out tokens/s':>14}{'ratio':>8}")
        for r in real["rows"]:
            if "error" in r:
                print(f"{r['row']:<40} failed: {r['error'][-120:]}")
                continue
            print(
                f"{r['row']:<36}{r['seconds']:>10}{r['samples']:>9}"
                f"{r['output_tokens_per_s']:>14}{r['ratio_vs_offline']:>8}"
            )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
