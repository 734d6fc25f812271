"""A benchmark as evaluation prompts: its data file converted (`eyas.sources`) and rendered
with the target's own template (`eyas.render`), exactly as `eyas convert` + `eyas render`
would, in memory. Every row that does not become a prompt is counted with its reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from eyas.benchmarks.catalog import Benchmark
from eyas.benchmarks.fetch import data_file
from eyas.records import RecordError, RowError
from eyas.render.probe import probe_template
from eyas.render.renderer import Renderer, RenderError
from eyas.render.run import render_row
from eyas.sources import convert_rows, read_rows


@dataclass
class BenchmarkSet:
    benchmark: str
    thinking: bool | None
    dataset: str  # the key results are grouped by
    rows: int = 0
    prompts: list[dict] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)  # convert and render reasons


def dataset_key(name: str, thinking: bool | None) -> str:
    return name if thinking is None else f"{name}#thinking-{'on' if thinking else 'off'}"


def benchmark_prompts(
    bench: Benchmark,
    renderer: Renderer,
    *,
    cache: Path | None = None,
    limit: int | None = None,
    probe: dict | None = None,
) -> BenchmarkSet:
    """The first `limit` prompts of `bench` (all by default) rendered by `renderer`."""
    path = data_file(bench.package, bench.member, cache)
    probe = probe if probe is not None else probe_template(renderer)
    key = dataset_key(bench.name, renderer.thinking)
    out = BenchmarkSet(bench.name, renderer.thinking, key)
    tools_ignored = not probe["tools_rendered"]
    for item in convert_rows(read_rows(path), bench.format, key, str(path)):
        if limit is not None and len(out.prompts) >= limit:
            break
        out.rows += 1
        if isinstance(item, RowError):
            out.rejected[item.reason] += 1
            continue
        if item.tools and not tools_ignored and not probe["declaration_matches_profile"]:
            out.rejected["wrong_tool_declaration"] += 1
            continue
        try:
            row = render_row(renderer, item.to_dict(), tools_ignored=tools_ignored)
        except (RenderError, RecordError) as exc:
            out.rejected[exc.reason] += 1
            continue
        out.prompts.append(
            {
                "id": row["id"],
                "dataset": key,
                "prompt_ids": row["prompt_ids"],
                "messages": row["messages"],
                "tools": row["tools"],
                "turn": row["turn"],
            }
        )
    return out
