"""In-process generation on a real model: `eyas generate --backend local` against
transformers' own batched `generate` on the same prompts, greedy, same batch size.

    .venv/bin/python bench/bench_local_generate.py [--prompts 48] [--max-new-tokens 128] \
        [--batch-size 16] [--repeats 2] [--model DIR]

The target is HF's pretrained SmolLM2-135M-Instruct (tools/smollm2.sh; 30 layers, fp32 on
CPU) unless `--model` names another directory. The prompts are the toy chat datasets (B4
ShareGPT, B5 UltraChat, B6 math, B7 code, B8 reasoning) rendered with the target's own
template, interleaved so lengths and answer lengths mix as in a real dataset.

Rows, each the median of `--repeats` runs, alternated so background load hits both alike:
- transformers batched: `model.generate` over consecutive chunks of `--batch-size` prompts in
  input order, left-padded, greedy, the target's stop ids (what a user of transformers
  writes).
- eyas local: `run_generate` with `backend.kind = "local"` and `concurrency = --batch-size`
  on a prepare directory of the same rendered prompts; the engine's own clock (model loading
  excluded for both).
Every eyas sample's ids are compared with transformers' ids for the same prompt.
ratio = transformers seconds / eyas seconds (> 1: eyas faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import zip_longest
from pathlib import Path

import torch
from peers import ROOT

from eyas.config import ModelConfig
from eyas.generate.config import BackendConfig, GenerateConfig, PipelineConfig
from eyas.generate.run import run_generate
from eyas.hf_models import load_frozen_lm
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import read_samples
from eyas.toy.datasets import FAMILIES, family_rows

CHAT = ("b4_sharegpt", "b5_ultrachat", "b6_math", "b7_code", "b8_reasoning")


def smollm2_dir() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "smollm2.sh"), sys.executable],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def prepare(model_dir: Path, root: Path, n: int) -> tuple[Path, list[dict]]:
    """A prepare dir holding one rendered file of `n` interleaved chat prompts."""
    renderer = Renderer(model_dir)
    per = 2 * -(-n // len(CHAT))  # the toy generator repeats itself; duplicates are dropped
    converted = []
    for name in CHAT:
        fam = next(f for f in FAMILIES if f.name == name)
        src, conv = root / f"{name}.src.jsonl", root / f"{name}.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, per, seed=11)) + "\n")
        convert_file(src, conv, fam.format, name)
        converted.append([json.loads(x) for x in conv.read_text().splitlines()])
    rows = [r for group in zip_longest(*converted) for r in group if r is not None][:n]
    mixed = root / "mixed.jsonl"
    mixed.write_text("".join(json.dumps({**r, "dataset": "chat"}) + "\n" for r in rows))
    prep = root / "prepare"
    render_file(renderer, mixed, prep / "rendered" / "chat.jsonl")
    rendered = [json.loads(x) for x in (prep / "rendered" / "chat.jsonl").read_text().splitlines()]
    return prep, rendered


def hf_batched(model, prompts, stop_ids, pad_id, max_new: int, batch: int) -> list[list[int]]:
    """transformers' batched greedy generate, chunks in input order, cut after the stop."""
    outs: list[list[int]] = []
    stops = set(stop_ids)
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for r, p in enumerate(chunk):
            ids[r, width - len(p) :] = torch.tensor(p)
            attn[r, width - len(p) :] = 1
        with torch.no_grad():
            gen = model.generate(
                input_ids=ids,
                attention_mask=attn,
                max_new_tokens=max_new,
                do_sample=False,
                eos_token_id=stop_ids,
                pad_token_id=pad_id,
            )
        for row in gen[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in stops), None)
            outs.append(row[: max_new if cut is None else cut + 1])
    return outs


def eyas_local(model_dir: Path, prep: Path, out: Path, max_new: int, batch: int) -> dict:
    cfg = PipelineConfig(
        model=ModelConfig(dir=model_dir),
        backend=BackendConfig(kind="local", concurrency=batch),
        generate=GenerateConfig(input=prep, out=out, max_new_tokens=max_new),
    )
    manifest = run_generate(cfg, Renderer(model_dir), show_progress=False)
    samples = {s.id: list(s.output_ids) for s in read_samples(out)}
    assert manifest.this_run.stats is not None, "nothing was generated"
    return {"seconds": manifest.this_run.stats.seconds, "outputs": samples}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", default="bench/results/local_generate.json")
    args = ap.parse_args()
    load_start = os.getloadavg()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = args.model or smollm2_dir()
    renderer = Renderer(model_dir)
    stop, pad = renderer.stop_token_ids(), renderer.tokenizer.pad_token_id or 0
    model = load_frozen_lm(model_dir, "cpu", torch.float32)
    hf_s, eyas_s, mismatched = [], [], set()
    with tempfile.TemporaryDirectory() as tmp:
        prep, rendered = prepare(model_dir, Path(tmp), args.prompts)
        prompts = [r["prompt_ids"] for r in rendered]
        for rep in range(args.repeats):
            t0 = time.perf_counter()
            ref = hf_batched(model, prompts, stop, pad, args.max_new_tokens, args.batch_size)
            hf_s.append(time.perf_counter() - t0)
            run = eyas_local(
                model_dir, prep, Path(tmp) / f"gen{rep}", args.max_new_tokens, args.batch_size
            )
            eyas_s.append(run["seconds"])
            for r, want in zip(rendered, ref):
                if run["outputs"].get(r["id"]) != want:
                    mismatched.add(r["id"])
            print(
                f"repeat {rep}: transformers {hf_s[-1]:.1f} s, eyas {eyas_s[-1]:.1f} s", flush=True
            )
        tokens = sum(len(o) for o in ref)
    hf_med, eyas_med = statistics.median(hf_s), statistics.median(eyas_s)
    rows = [
        {"path": "transformers batched generate", "seconds": round(hf_med, 2)},
        {"path": "eyas generate --backend local", "seconds": round(eyas_med, 2)},
    ]
    for row in rows:
        row["output_tok_s"] = round(tokens / row["seconds"], 1)
        row["samples_s"] = round(len(prompts) / row["seconds"], 3)
    ratio = round(hf_med / eyas_med, 2)
    print(
        f"{len(prompts)} prompts, <= {args.max_new_tokens} new tokens, batch {args.batch_size}, "
        f"{tokens} output tokens, {Path(model_dir).name}, {torch.get_num_threads()} threads"
    )
    print(f"{'path':<34}{'seconds':>10}{'tok/s':>10}{'samples/s':>11}")
    for row in rows:
        print(
            f"{row['path']:<34}{row['seconds']:>10}{row['output_tok_s']:>10}{row['samples_s']:>11}"
        )
    print(
        f"ratio (transformers s / eyas s): {ratio}; ids equal: {len(prompts) - len(mismatched)}"
        f"/{len(prompts)}"
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "bench": "local_generate",
                "command": "bench/bench_local_generate.py " + " ".join(sys.argv[1:]),
                "load_average": {"start": load_start, "end": os.getloadavg()},
                "model": str(model_dir),
                "prompts": len(prompts),
                "max_new_tokens": args.max_new_tokens,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "torch_threads": torch.get_num_threads(),
                "output_tokens": tokens,
                "runs_seconds": {"transformers": hf_s, "eyas": eyas_s},
                "rows": rows,
                "ratio_transformers_over_eyas": ratio,
                "ids_equal": len(prompts) - len(mismatched),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
