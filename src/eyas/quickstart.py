"""`eyas quickstart`: the toy world end to end on the embedded backend (docs/architecture.md).

    make quickstart        # or: eyas quickstart [--out runs/quickstart] [--rows 40]

1. build (or reuse) the toy `small` Kimi-format target;
2. write the eight toy source datasets in their original formats (training and held-out rows);
3. prepare (convert + render natively) and generate with the in-process backend;
4. audit the run (per-sample defects are quarantined; training skips them);
5. the experiment behind eyas: render B1 the naive way (tool schemas pasted as JSON into the
   system prompt), generate and audit it too: the audit fails it on `tool-format` while the
   native run passes;
6. train the EAGLE-3 drafter on all native data, export it for SGLang and vLLM (validated);
7. measure acceptance per dataset on held-out native prompts (lossless speculative decoding);
8. the A/B: two B1 drafters, trained on the native and on the naive rendering, both measured
   on native prompts.

It writes `OUT/report.html` (the audit, then acceptance per dataset and per position and the
A/B as charts), `OUT/eval.json`, and exits 0 when the structural outcome holds
(`quickstart_failures`).
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from eyas.audit import AuditOptions, run_audit
from eyas.audit.report import write_html
from eyas.config import ModelConfig, config_toml
from eyas.evaluate.result import EvalResult, EvalRun, Figures
from eyas.generate.config import (
    BackendConfig,
    DatasetConfig,
    GenerateConfig,
    PipelineConfig,
    RunConfig,
)
from eyas.generate.prepare import PreparedDataset, prepare
from eyas.generate.run import run_generate
from eyas.records import Conversation
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.store import load_table, quarantine_path, read_quarantine, write_quarantine
from eyas.toy.build import build_toy
from eyas.toy.datasets import FAMILIES, write_datasets
from eyas.toy.naive import naive_glaive_messages
from eyas.train.result import StepMetrics


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
    """The resolved config, every field of it, so `eyas generate --config` reruns or resumes
    this run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "written by `eyas quickstart`: the resolved config of its native run\n"
    header += f"eyas generate --config {path}   # reruns or resumes it"
    path.write_text(config_toml(cfg, header))


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


def _eval_html(evals: Mapping[str, EvalRun], ab: Mapping[str, Figures]) -> str:
    """The quickstart's half of the report: acceptance per dataset and per position, and the
    A/B, each as a chart (inline SVG) beside its table."""
    from eyas.evaluate.plots import acceptance_bars, charts_row, position_bars
    from eyas.evaluate.report import acceptance_charts

    rows = []
    names = sorted({n for e in evals.values() for n in e.datasets})
    for name in names:
        d = evals["native"].datasets.get(name)
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{d.acceptance_length if d else 0:.3f}</td>"
            f"<td>{d.mean_accepted_drafts if d else 0:.3f}</td>"
            f"<td>{' '.join(f'{p:.2f}' for p in (d.per_position if d else []))}</td></tr>"
        )
    k = evals["native"].settings.k
    ab_rows = "".join(
        f"<tr><td>{html.escape(n)}</td><td>{r.acceptance_length:.3f}</td>"
        f"<td>{' '.join(f'{p:.2f}' for p in r.per_position)}</td></tr>"
        for n, r in ab.items()
    )
    trained_on = {"b1_native": "trained on native data", "b1_naive": "trained on naive data"}
    ab_charts = charts_row(
        acceptance_bars(
            {trained_on.get(n, n): r.acceptance_length for n, r in ab.items()},
            k,
            "B1 acceptance length on native prompts",
        ),
        position_bars(
            {trained_on.get(n, n): r.per_position for n, r in ab.items()},
            "B1 acceptance per draft position",
        ),
    )
    return (
        f"<h2>Acceptance length (chain K={k}, temperature 0, lossless="
        f"{evals['native'].lossless})</h2><p>tokens per target verify step, bonus included "
        f"(SGLang's definition)</p>{acceptance_charts(evals['native'])}"
        "<table><tr><th>dataset</th><th>acceptance_length</th>"
        f"<th>mean_accepted_drafts</th><th>per position</th></tr>{''.join(rows)}</table>"
        "<h2>B1 drafter A/B: trained on native vs naive (JSON in system prompt) rendering, "
        f"both evaluated on native prompts</h2>{ab_charts}"
        "<table><tr><th>drafter</th>"
        f"<th>acceptance_length</th><th>per position</th></tr>{ab_rows}</table>"
    )


def _b1_only(stage: Path, out: Path, skip: set[str]) -> Path:
    table = load_table(stage)
    keep = [
        i
        for i in range(len(table))
        if table.dataset[i].startswith("b1_glaive") and table.ids[i] not in skip
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        for i in keep:
            f.write(orjson.dumps(table.sample(i).to_dict()) + b"\n")
    return out


def run_quickstart(
    out: Path,
    rows: int = 60,
    max_new_tokens: int = 256,
    console: Console | None = None,
    train_steps: int = 160,
    ab_steps: int = 80,
    eval_limit: int = 10,
    k: int = 3,
) -> QuickstartResult:
    from eyas.evaluate.config import EvalConfig
    from eyas.evaluate.run import run_eval
    from eyas.export.drafter import EXPORT_FORMATS, export_drafter
    from eyas.export.validate import check_export
    from eyas.train.config import TrainConfig
    from eyas.train.loop import run_train

    console = console or Console(stderr=True)
    start = time.time()

    def say(msg: str) -> None:
        console.print(f"[{time.time() - start:5.0f}s] {msg}")

    say("1/8 toy target (built once, then cached)")
    model_dir = build_toy("small", log=lambda s: say(f"    {s}"))
    say(f"    {model_dir}")
    say("2/8 source datasets B1..B8 in their original formats (train and held-out eval rows)")
    sources = write_datasets(out / "sources", rows, seed=1)
    eval_sources = write_datasets(out / "eval_sources", rows, seed=2)
    cfg = _config(out, model_dir, sources, max_new_tokens)
    _write_toml(cfg, out / "quickstart.toml")
    renderer = Renderer(model_dir)
    say("3/8 prepare (convert + native render) and generate (in-process backend)")
    summary = prepare(cfg, renderer)
    run_generate(cfg, renderer, show_progress=False)
    eval_cfg = _config(out, model_dir, eval_sources, max_new_tokens)
    eval_cfg.run.name = "eval"
    prepare(eval_cfg, renderer)
    say("4/8 audit (per-sample defects are quarantined; training skips them)")
    native_stage = cfg.stage_dir("generate")
    native = run_audit(native_stage, model_dir, AuditOptions())
    write_quarantine(quarantine_path(native_stage), native.quarantine)
    (out / "native" / "audit.json").write_text(json.dumps(native.to_dict(), indent=2))
    say("5/8 the naive B1 rendering: tool schemas pasted into the system prompt")
    naive_dir = naive_b1(cfg.stage_dir("prepare"), renderer, out / "naive_b1" / "prepare")
    naive_cfg = cfg.model_copy(deep=True)
    naive_cfg.generate.input, naive_cfg.generate.out = naive_dir, out / "naive_b1" / "generate"
    run_generate(naive_cfg, renderer, show_progress=False)
    naive = run_audit(naive_cfg.generate.out, model_dir, AuditOptions())
    naive_report = write_html(naive, out / "naive_b1" / "audit.html")

    def train(data: Path, name: str, steps: int) -> Path:
        last = {"t": 0.0}

        def on_step(m: StepMetrics) -> None:
            if time.time() - last["t"] > 15 or m.step == steps:
                last["t"] = time.time()
                say(
                    f"    {name}: step {m.step}/{steps} loss {m.loss:.3f} "
                    f"acc {' '.join(f'{a:.2f}' for a in m.per_step_acc)}"
                )

        tcfg = TrainConfig(
            target=model_dir,
            data=data,
            out=out / "drafters" / name,
            steps=steps,
            ttt=3,  # the draft vocabulary is the default: the toy's supervised tokens
            max_len=2048,
            batch_tokens=4096,
            lr=3e-3,
            warmup_steps=10,
            checkpoint_every=100,
        )
        return run_train(tcfg, log=lambda s: say(f"    {s}"), on_step=on_step).drafter

    say(f"6/8 train the EAGLE-3 drafter on all native data ({train_steps} steps)")
    drafter = train(cfg.stage_dir("generate"), "native_all", train_steps)
    for fmt in EXPORT_FORMATS:
        check_export(export_drafter(drafter, fmt, out / "export" / fmt))
    say(f"    exported and validated: {out / 'export'}")
    say("7/8 eval: acceptance length per dataset on held-out natively rendered prompts")

    def evaluate(drafter_dir: Path, prompts: Path, limit: int | None) -> EvalResult:
        ecfg = EvalConfig(
            target=model_dir,
            drafter=drafter_dir,
            input=prompts,
            k=k,
            max_new_tokens=160,
            limit=limit,
        )
        return run_eval(ecfg, log=lambda s: None)

    evals = {"native": evaluate(drafter, eval_cfg.stage_dir("prepare"), eval_limit)}
    say("8/8 the A/B: B1 drafters trained on native vs naive rendering, eval on native prompts")
    ab = {}
    b1_eval = eval_cfg.stage_dir("prepare") / "rendered" / "b1_glaive.jsonl"
    quarantined = set(read_quarantine(quarantine_path(native_stage)))
    for name, stage in (("b1_native", native_stage), ("b1_naive", naive_cfg.generate.out)):
        # The naive data is quarantined whole by the audit; this experiment trains on it on
        # purpose, to show what such data does to a drafter.
        skip = quarantined if name == "b1_native" else set()
        data = _b1_only(stage, out / "drafters" / f"{name}.samples.jsonl", skip)
        ab[name] = evaluate(train(data, name, ab_steps), b1_eval, None)
    report = write_html(native, out / "report.html", _eval_html(evals, ab), title=REPORT_TITLE)
    (out / "eval.json").write_text(
        json.dumps(
            {"native": evals["native"].to_dict(), "ab": {n: r.to_dict() for n, r in ab.items()}},
            indent=2,
        )
    )

    table = Table(
        "dataset",
        "samples",
        "quarantined",
        "systemic errors",
        "acceptance_length",
        "per position",
        title=f"quickstart: native rendering (chain K={k}, T=0)",
    )
    for name, d in native.dataset_profiles().items():
        fs = [f for f in native.findings if f.dataset == name]
        e = evals["native"].datasets.get(name)
        table.add_row(
            name,
            str(d.samples),
            f"{d.quarantined_share:.1%}",
            str(sum(f.severity == "error" and f.systemic for f in fs)),
            f"{e.acceptance_length if e else 0:.3f}",
            " ".join(f"{p:.2f}" for p in (e.per_position if e else [])),
        )
    table.add_row(
        "all",
        str(len(native.table)),
        str(len(native.quarantine)),
        str(native.num_errors),
        f"{evals['native'].acceptance_length:.3f}",
        " ".join(f"{p:.2f}" for p in evals["native"].per_position),
    )
    console.print(table)
    naive_checks = sorted({f.check for f in naive.findings if f.severity == "error" and f.systemic})
    console.print(
        f"audit: native run {native.verdict} ({native.num_errors} systemic errors, "
        f"{len(native.quarantine)} samples quarantined); naive B1 run {naive.verdict} on "
        f"{naive_checks}"
    )
    margin = ab["b1_native"].acceptance_length - ab["b1_naive"].acceptance_length
    console.print(
        f"B1 A/B on native prompts: drafter trained on native data AL "
        f"{ab['b1_native'].acceptance_length:.3f} vs naive data AL "
        f"{ab['b1_naive'].acceptance_length:.3f} (tokens per verify step, K={k})"
    )
    console.print(
        f"lossless: {evals['native'].lossless}   report: {report}   naive audit: {naive_report}"
    )
    failures = quickstart_failures(native, naive, margin, evals, ab)
    say("done" if not failures else f"done, {len(failures)} check(s) failed")
    return QuickstartResult(
        failures=failures,
        native_verdict=native.verdict,
        native_quarantined=len(native.quarantine),
        naive_verdict=naive.verdict,
        naive_systemic_checks=naive_checks,
        report=report,
        acceptance_length=evals["native"].acceptance_length,
        lossless=evals["native"].lossless,
        ab={n: r.acceptance_length for n, r in ab.items()},
        model_dir=model_dir,
        summary=summary,
    )


@dataclass(frozen=True)
class QuickstartResult:
    """What `run_quickstart` found; `failures` empty when the structural outcome holds."""

    failures: list[str]
    native_verdict: str
    native_quarantined: int
    naive_verdict: str
    naive_systemic_checks: list[str]
    report: Path
    acceptance_length: float  # the native drafter, every held-out dataset
    lossless: bool | None
    ab: dict[str, float]  # B1 drafter -> acceptance length on native prompts
    model_dir: Path
    summary: dict[str, PreparedDataset]


REPORT_TITLE = "eyas quickstart: audit, acceptance and the native-vs-naive A/B"
AB_MARGIN = 0.5  # tokens per verify step; the quickstart prints the margin it measured


def quickstart_failures(
    native, naive, margin: float, evals: Mapping[str, EvalRun], ab: Mapping[str, EvalRun]
) -> list[str]:
    """The quickstart's pass criterion is structural, not one machine's numbers: the audit
    passes the native run (defects quarantined, none systemic) and fails the naive one on
    tool-format, the native-trained B1 drafter beats the naive-trained one clearly, and
    speculative decoding is lossless."""
    failures = []
    if native.verdict != "PASS":
        failures.append(f"the native run's audit is {native.verdict}, not PASS")
    if "tool-format" not in {
        f.check for f in naive.findings if f.systemic and f.severity == "error"
    }:
        failures.append("the naive run was not failed on tool-format")
    if margin < AB_MARGIN:
        failures.append(
            f"native-trained B1 drafter beats the naive one by {margin:.2f} < {AB_MARGIN}"
        )
    if not evals["native"].lossless or not all(r.lossless for r in ab.values()):
        failures.append("speculative decoding was not lossless")
    return failures
