"""Convert + render throughput: 10,000 Glaive-style rows through `eyas convert` and the
K2.5-style renderer (TypeScript tool declarations), on all cores.

    .venv/bin/python bench/bench_convert_render.py [--rows 10000] [--workers 2] [--json out.json]

Prints a table and writes JSON. Goal (issue 2): at least 2,000 conversations/s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from eyas.records import Conversation
from eyas.render.renderer import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer

_renderer: Renderer | None = None


def _init(model_dir: str) -> None:
    global _renderer
    _renderer = Renderer(model_dir)


def _work(rows: list[dict]) -> tuple[int, int]:
    assert _renderer is not None
    n, tokens = 0, 0
    for item in convert_rows(rows, "glaive", "b1"):
        if isinstance(item, Conversation):
            tokens += len(_renderer.render_conversation(item).prompt_ids)
            n += 1
    return n, tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default="bench/results/convert_render.json")
    args = ap.parse_args()
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    rows = family_rows(glaive, args.rows, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tokenizer(train_tokenizer([str(r) for r in rows[:2000]], 2048), Path(tmp))
        chunks = [rows[i : i + 500] for i in range(0, len(rows), 500)]
        with ProcessPoolExecutor(
            args.workers, initializer=_init, initargs=(str(model_dir),)
        ) as pool:
            list(pool.map(_work, [rows[:50]] * args.workers))  # warm up: imports, template compile
            start = time.perf_counter()
            results = list(pool.map(_work, chunks))
            elapsed = time.perf_counter() - start
    convs = sum(n for n, _ in results)
    tokens = sum(t for _, t in results)
    out = {
        "bench": "convert_render",
        "rows": args.rows,
        "conversations": convs,
        "workers": args.workers,
        "seconds": round(elapsed, 3),
        "conversations_per_s": round(convs / elapsed, 1),
        "prompt_tokens_per_s": round(tokens / elapsed, 1),
        "goal_conversations_per_s": 2000,
    }
    print(f"{'metric':<24}{'value':>14}")
    for k in ("conversations", "workers", "seconds", "conversations_per_s", "prompt_tokens_per_s"):
        print(f"{k:<24}{out[k]:>14}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
