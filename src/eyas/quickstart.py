"""`eyas quickstart`: the toy world end to end on the embedded backend (design.md §10).

    make quickstart        # or: eyas quickstart [--out runs/quickstart] [--rows 40]

1. build (or reuse) the toy `small` Kimi-format target;
2. write the eight toy source datasets in their original formats;
3. prepare (convert + render natively) and generate with the in-process backend;
4. audit the run and write an HTML report;
5. the experiment behind eyas: render B1 the naive way (tool schemas pasted as JSON into the
   system prompt), generate and audit it too, and show that the audit fails it on
   `tool-format` while the native run passes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from eyas.audit import AuditOptions, run_audit
from eyas.audit.report import write_html
from eyas.config import (
    BackendConfig,
    DatasetConfig,
    GenerateConfig,
    ModelConfig,
    PipelineConfig,
    RunConfig,
)
from eyas.generate.run import options_from_config, prepare, run_generate
from eyas.records import Conversation
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.toy.build import build_toy
from eyas.toy.datasets import FAMILIES, write_datasets
from eyas.toy.naive import naive_glaive_messages


def _config(
    out: Path, model_dir: Path, sources: dict[str, Path], max_new_tokens: int
) -> PipelineConfig:
    return PipelineConfig(
        run=RunConfig(name="native", dir=out),
        model=ModelConfig(dir=model_dir),
        backend=BackendConfig(kind="local", concurrency=32),
        generate=GenerateConfig(max_new_tokens=max_new_tokens, shard_size=500),
        datasets=[
            DatasetConfig(name=f.name, path=sources[f.name], format=f.format) for f in FAMILIES
        ],
    )


def _write_toml(cfg: PipelineConfig, path: Path) -> None:
    """The resolved config, so `eyas generate --config` reruns or resumes this run."""
    lines = [
        f'[run]\nname = "{cfg.run.name}"\ndir = "{cfg.run.dir}"\n',
        f'[model]\ndir = "{cfg.model.dir}"\n',
        f'[backend]\nkind = "{cfg.backend.kind}"\nconcurrency = {cfg.backend.concurrency}\n',
        f"[generate]\nmax_new_tokens = {cfg.generate.max_new_tokens}\n",
    ]
    for d in cfg.datasets:
        lines.append(f'[[datasets]]\nname = "{d.name}"\npath = "{d.path}"\nformat = "{d.format}"\n')
    path.write_text("# written by `eyas quickstart`\n" + "\n".join(lines))


def naive_b1(native_prepare: Path, renderer: Renderer, out: Path) -> Path:
    """B1 conversations re-rendered Glaive-style: schemas in the system text, no `tools=`."""
    src = native_prepare / "conversations" / "b1_glaive.jsonl"
    naive_conv = out / "conversations" / "b1_glaive_naive.jsonl"
    naive_conv.parent.mkdir(parents=True, exist_ok=True)
    with naive_conv.open("wb") as f:
        for line in src.read_bytes().splitlines():
            conv = Conversation.from_dict(orjson.loads(line))
            if not conv.tools:
                continue
            messages = naive_glaive_messages(conv.messages, conv.tools)
            row = {
                **conv.to_dict(),
                "dataset": "b1_glaive_naive",
                "messages": messages,
                "tools": [],
            }
            f.write(orjson.dumps(row) + b"\n")
    render_file(renderer, naive_conv, out / "rendered" / "b1_glaive_naive.jsonl")
    return out


def run_quickstart(
    out: Path, rows: int = 40, max_new_tokens: int = 256, console: Console | None = None
) -> dict:
    console = console or Console(stderr=True)
    start = time.time()

    def say(msg: str) -> None:
        console.print(f"[{time.time() - start:5.0f}s] {msg}")

    say("1/5 toy target (built once, then cached)")
    model_dir = build_toy("small", log=lambda s: say(f"    {s}"))
    say(f"    {model_dir}")
    say("2/5 source datasets B1..B8 in their original formats")
    sources = write_datasets(out / "sources", rows, seed=1)
    cfg = _config(out, model_dir, sources, max_new_tokens)
    _write_toml(cfg, out / "quickstart.toml")
    renderer = Renderer(model_dir)
    say("3/5 prepare (convert + native render) and generate (in-process backend)")
    summary = prepare(cfg, renderer)
    opts = options_from_config(cfg)
    run_generate(opts, renderer, model_dir)
    say("4/5 audit")
    native = run_audit(cfg.stage_dir("generate"), model_dir, AuditOptions())
    report = write_html(native, out / "native" / "audit.html")
    (out / "native" / "audit.json").write_text(json.dumps(native.to_dict(), indent=2))
    say("5/5 the naive B1 rendering: tool schemas pasted into the system prompt")
    naive_dir = naive_b1(cfg.stage_dir("prepare"), renderer, out / "naive_b1" / "prepare")
    naive_opts = options_from_config(cfg)
    naive_opts.input, naive_opts.out = naive_dir, out / "naive_b1" / "generate"
    run_generate(naive_opts, renderer, model_dir)
    naive = run_audit(naive_opts.out, model_dir, AuditOptions())
    naive_report = write_html(naive, out / "naive_b1" / "audit.html")

    table = Table(
        "dataset",
        "converted",
        "samples",
        "output p50",
        "stop",
        "length",
        "errors",
        "warnings",
        title="quickstart: native rendering",
    )
    datasets = native.to_dict()["datasets"]
    for name, d in datasets.items():
        fs = [f for f in native.findings if f.dataset == name]
        table.add_row(
            name,
            str(summary[name]["converted"]),
            str(d["samples"]),
            f"{d['output'].get('median', 0):.0f}",
            str(d["finish_reasons"].get("stop", 0)),
            str(d["finish_reasons"].get("length", 0)),
            str(sum(f.severity == "error" for f in fs)),
            str(sum(f.severity == "warning" for f in fs)),
        )
    console.print(table)
    tool_format = [f for f in naive.findings if f.check == "tool-format" and f.severity == "error"]
    console.print(
        f"native run: {'[green]PASS[/]' if native.num_errors == 0 else '[red]FAIL[/]'} "
        f"({native.num_errors} errors)  report: {report}"
    )
    console.print(
        f"naive B1 run: {'[red]FAIL[/]' if naive.num_errors else '[green]PASS[/]'} on "
        f"{sorted({f.check for f in naive.findings if f.severity == 'error'})}; "
        f"tool-format hits {sum(f.count for f in tool_format)}  report: {naive_report}"
    )
    say("done")
    return {
        "native_errors": native.num_errors,
        "naive_errors": naive.num_errors,
        "naive_tool_format": bool(tool_format),
        "report": str(report),
        "naive_report": str(naive_report),
        "model_dir": str(model_dir),
    }
