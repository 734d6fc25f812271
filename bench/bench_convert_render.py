"""Convert + render throughput: 10,000 distinct Glaive-style rows through `eyas convert` and the
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
from eyas.render.renderer import Renderer, last_assistant_index
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


def _work_transformers(rows: list[dict]) -> tuple[int, int]:
    """The baseline peers use: the same conversion and normalisation, then
    `apply_chat_template(tokenize=True)` per conversation."""
    r = _renderer
    assert r is not None
    n, tokens = 0, 0
    for item in convert_rows(rows, "glaive", "b1"):
        if isinstance(item, Conversation):
            messages, _ = r.prepare(item)
            history = messages[: last_assistant_index(messages)]
            tools, ts = r._prepared_tools(item.tools)
            ids = r.tokenizer.apply_chat_template(
                history,
                tools=tools,
                add_generation_prompt=True,
                tools_ts_str=ts,
                return_dict=False,
                **r.template_kwargs,
            )
            tokens += len(ids)
            n += 1
    return n, tokens


def _timed(pool: ProcessPoolExecutor, fn, chunks: list[list[dict]]) -> tuple[int, int, float]:
    start = time.perf_counter()
    results = list(pool.map(fn, chunks))
    elapsed = time.perf_counter() - start
    return sum(n for n, _ in results), sum(t for _, t in results), elapsed


def distinct_glaive_rows(n: int) -> list[dict]:
    """n distinct rows: the toy generator repeats itself, and a repeated row is rejected as
    `duplicate_conversation` before rendering, which would flatter the figure."""
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    seen: set[str] = set()
    rows: list[dict] = []
    seed = 7
    while len(rows) < n:
        for row in family_rows(glaive, n, seed=seed):
            key = json.dumps(row, sort_keys=True)
            if key not in seen and len(rows) < n:
                seen.add(key)
                rows.append(row)
        seed += 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", default="bench/results/convert_render.json")
    args = ap.parse_args()
    rows = distinct_glaive_rows(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tokenizer(train_tokenizer([str(r) for r in rows[:2000]], 2048), Path(tmp))
        chunks = [rows[i : i + 500] for i in range(0, len(rows), 500)]
        with ProcessPoolExecutor(
            args.workers, initializer=_init, initargs=(str(model_dir),)
        ) as pool:
            for fn in (_work, _work_transformers):  # warm up: imports, template compile
                list(pool.map(fn, [rows[:50]] * args.workers))
            convs, tokens, elapsed = _timed(pool, _work, chunks)
            base_convs, base_tokens, base_elapsed = _timed(pool, _work_transformers, chunks)
    if (base_convs, base_tokens) != (convs, tokens):
        raise SystemExit("baseline rendered a different number of conversations or tokens")
    out = {
        "bench": "convert_render",
        "rows": args.rows,
        "conversations": convs,
        "workers": args.workers,
        "seconds": round(elapsed, 3),
        "conversations_per_s": round(convs / elapsed, 1),
        "prompt_tokens_per_s": round(tokens / elapsed, 1),
        "transformers_apply_chat_template_conversations_per_s": round(base_convs / base_elapsed, 1),
        "ratio_vs_transformers": round(base_elapsed / elapsed, 2),
        "goal_conversations_per_s": 2000,
    }
    print(f"{'':<34}{'conversations/s':>16}{'ratio':>8}")
    print(
        f"{'eyas convert+render':<34}{out['conversations_per_s']:>16}{out['ratio_vs_transformers']:>8}"
    )
    print(
        f"{'convert + apply_chat_template':<34}"
        f"{out['transformers_apply_chat_template_conversations_per_s']:>16}{1.0:>8}"
    )
    print(f"{convs} conversations, {tokens} prompt tokens, {args.workers} workers")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
