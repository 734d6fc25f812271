"""eyas command line: one sub-command per stage; parsing and dispatch only.

eyas convert --format auto --dataset b1 glaive.jsonl b1.jsonl
eyas render --model ~/models/Kimi-K2.5 --trust-remote-code b1.jsonl b1.rendered.jsonl
eyas toy build --preset small
eyas quickstart
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
toy_app = typer.Typer(no_args_is_help=True, help="The toy world: a small Kimi-format target.")
app.add_typer(toy_app, name="toy")
console = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _thinking(value: str | None) -> bool | None:
    if value is None:
        return None
    if value not in ("on", "off"):
        _fail(f"--thinking takes on|off, not {value!r}")
    return value == "on"


@app.command()
def convert(
    input: Annotated[Path, typer.Argument(help="JSONL, JSON array, Parquet or save_to_disk dir")],
    output: Annotated[Path, typer.Argument(help="canonical conversations (JSONL)")],
    format: Annotated[
        str, typer.Option(help="glaive|hermes|xlam|sharegpt|ultrachat|openai|auto")
    ] = "auto",
    dataset: Annotated[str, typer.Option(help="dataset name stored on every row")] = "",
) -> None:
    """Convert a source dataset to canonical conversations with structured tools."""
    from eyas.sources.io import SourceFileError
    from eyas.sources.run import convert_file, errors_path

    try:
        result = convert_file(input, output, format, dataset or input.stem)
    except (SourceFileError, ValueError) as exc:
        _fail(str(exc))
    chosen = f"{result.format} (detected)" if result.detected else result.format
    console.print(f"format: {chosen}")
    console.print(
        f"{result.num_converted}/{result.num_rows} rows converted -> {output}; "
        f"{result.num_rows - result.num_converted} rejected -> {errors_path(output)}"
    )
    if result.reasons:
        table = Table("reason", "rows", title="rejected rows")
        for reason, n in result.reasons.most_common():
            table.add_row(reason, str(n))
        console.print(table)
    if result.notes:
        table = Table("conversion action", "rows", title="conversion notes")
        for note, n in result.notes.most_common(12):
            table.add_row(note, str(n))
        console.print(table)


@app.command()
def render(
    input: Annotated[Path, typer.Argument(help="output of `eyas convert`")],
    output: Annotated[Path, typer.Argument(help="input lines plus prompt_ids and prompt_text")],
    model: Annotated[Path, typer.Option(help="local model or tokenizer directory")],
    thinking: Annotated[str | None, typer.Option(help="on|off (the profile's switch)")] = None,
    profile: Annotated[str | None, typer.Option(help="kimi-k2.5|kimi-k2|qwen3|generic")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
) -> None:
    """Render prompts with the model's own chat template (tools passed as structured tools=)."""
    from eyas.render import Renderer, TemplateProbeError
    from eyas.render.run import render_file

    renderer = Renderer(model, profile, _thinking(thinking), trust_remote_code)
    try:
        result = render_file(renderer, input, output)
    except TemplateProbeError as exc:
        _fail(str(exc), 1)
    probe = result.probe
    console.print(
        f"profile {renderer.profile.name}; tools {probe['declaration_style']}; default system "
        f"prompt {'injected' if probe['default_system_injected'] else 'none'}; prefix-stable "
        f"{probe['prefix_stable']}"
    )
    console.print(f"{result.num_rendered} prompts -> {output}; manifest {result.manifest_path}")
    for reason, n in result.reasons.most_common():
        console.print(f"  rejected {n}: {reason}")


def _renderer_for(model: Path, profile: str | None, thinking: bool | None, trust: bool):
    from eyas.render import Renderer

    return Renderer(model, profile, thinking, trust)


@app.command()
def prepare(
    config: Annotated[Path, typer.Option(help="pipeline TOML")],
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="dotted override key=value")
    ] = None,
) -> None:
    """Convert and render every dataset of a pipeline config."""
    from eyas.config import load_config
    from eyas.generate.run import prepare as run_prepare
    from eyas.render import TemplateProbeError

    cfg = load_config(config, set_)
    renderer = _renderer_for(
        cfg.model.dir, cfg.model.profile, cfg.model.thinking, cfg.model.trust_remote_code
    )
    try:
        summary = run_prepare(cfg, renderer)
    except TemplateProbeError as exc:
        _fail(str(exc), 1)
    table = Table("dataset", "format", "converted", "rejected", "rendered", title="prepare")
    for name, s in summary.items():
        table.add_row(
            name,
            s["format"],
            str(s["converted"]),
            str(sum(s["convert_reasons"].values())),
            str(s["rendered"]),
        )
    console.print(table)
    console.print(f"-> {cfg.stage_dir('prepare')}")


@app.command()
def generate(
    config: Annotated[Path | None, typer.Option(help="pipeline TOML (or use the flags)")] = None,
    model: Annotated[Path | None, typer.Option(help="local model directory")] = None,
    backend: Annotated[str, typer.Option(help="sglang|vllm|openai_chat|local")] = "local",
    url: Annotated[list[str] | None, typer.Option(help="server URL; repeat for several")] = None,
    input: Annotated[Path | None, typer.Option(help="rendered JSONL or prepare dir")] = None,
    out: Annotated[Path | None, typer.Option(help="stage directory")] = None,
    max_new_tokens: Annotated[int, typer.Option()] = 2048,
    temperature: Annotated[float, typer.Option()] = 0.0,
    concurrency: Annotated[int, typer.Option(help="in-flight requests per server")] = 64,
    batch_size: Annotated[int, typer.Option(help="sglang: prompts per /generate call")] = 8,
    shard: Annotated[str, typer.Option(help="i/n: this job's slice of ids")] = "0/1",
    multi_turn: Annotated[str, typer.Option(help="last|all")] = "last",
    thinking: Annotated[str | None, typer.Option(help="on|off")] = None,
    profile: Annotated[str | None, typer.Option()] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
    timeout: Annotated[float, typer.Option(help="seconds per request")] = 600.0,
    max_attempts: Annotated[int, typer.Option(help="tries per request")] = 5,
    max_consecutive_failures: Annotated[
        int, typer.Option(help="stop (resumable) after this many jobs in a row fail; 0: never")
    ] = 64,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    shard_size: Annotated[int, typer.Option(help="samples per committed Parquet shard")] = 2000,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="dotted override key=value")
    ] = None,
) -> None:
    """Regenerate responses with exact token ids; resumable (rerun to resume)."""
    from eyas.config import load_config
    from eyas.generate.run import (
        StageError,
        flag_options,
        options_from_config,
        parse_shard,
        run_generate,
    )

    try:
        if config is not None:
            cfg = load_config(config, set_)
            opts = options_from_config(cfg, parse_shard(shard))
            model_dir = cfg.model.dir
            renderer = _renderer_for(
                model_dir, cfg.model.profile, cfg.model.thinking, cfg.model.trust_remote_code
            )
        else:
            if model is None or input is None or out is None:
                _fail("without --config, --model, --input and --out are required")
            if multi_turn not in ("last", "all"):
                _fail("--multi-turn takes last|all")
            opts = flag_options(
                input,
                out,
                backend,
                url or [],
                max_new_tokens,
                temperature,
                concurrency,
                shard,
                multi_turn,
                timeout,
                max_attempts,
            )
            model_dir = model
            renderer = _renderer_for(model, profile, _thinking(thinking), trust_remote_code)
        opts.show_progress = progress
        if config is None:
            opts.shard_size = shard_size
            opts.backend.batch_size = batch_size
            opts.backend.retry.max_consecutive_failures = max_consecutive_failures
        manifest = run_generate(opts, renderer, model_dir)
    except StageError as exc:
        _fail(str(exc), 1)
    except ValueError as exc:
        _fail(str(exc))
    run = manifest["this_run"]
    console.print(
        f"{run['samples_written']} samples written, {run['failed']} failed, {run['retries']} "
        f"retries, skipped {run['skipped']}; {manifest['counts']['samples']} samples in {opts.out}"
    )
    if run["failure_reasons"]:
        console.print(
            f"failure reasons: {run['failure_reasons']} (see {opts.out / 'errors.jsonl'})"
        )
    if not manifest["complete"]:
        if manifest["stopped_reason"] != "interrupted":
            console.print(
                f"[red]stopped: {manifest['stopped_reason']}[/]; fix the servers and rerun "
                "the same command to resume"
            )
            raise typer.Exit(1)
        console.print("[yellow]interrupted: rerun the same command to resume[/]")
        raise typer.Exit(130)


@app.command()
def audit(
    input: Annotated[Path, typer.Argument(help="stage dir, run dir, Parquet or sample JSONL")],
    model: Annotated[Path | None, typer.Option(help="model dir (tokenizer + template)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write findings as JSON")] = None,
    html_out: Annotated[
        Path | None, typer.Option("--html", help="write a self-contained HTML report")
    ] = None,
    max_len: Annotated[int | None, typer.Option(help="planned training/serving length")] = None,
    sample: Annotated[int, typer.Option(help="per-dataset sample for decoding checks")] = 2000,
    profile: Annotated[str | None, typer.Option(help="override the detected profile")] = None,
    trust_remote_code: Annotated[bool, typer.Option("--trust-remote-code")] = False,
) -> None:
    """Audit samples; exit 1 when any error-severity finding exists."""
    import json

    from eyas.audit import AuditOptions, run_audit
    from eyas.audit.report import print_summary, write_html
    from eyas.records import RecordError

    try:
        result = run_audit(
            input,
            model,
            AuditOptions(max_len=max_len, decode_sample=sample),
            profile,
            trust_remote_code,
        )
    except RecordError as exc:
        _fail(str(exc))
    print_summary(result, console)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        console.print(f"json: {json_out}")
    if html_out:
        console.print(f"html: {write_html(result, html_out)}")
    raise typer.Exit(1 if result.num_errors else 0)


@app.command()
def show(
    run: Annotated[Path, typer.Argument(help="stage dir, run dir, Parquet or sample JSONL")],
    id: Annotated[str, typer.Argument(help="sample id (a unique prefix is enough)")],
    model: Annotated[
        Path | None, typer.Option(help="model dir (default: from the manifest)")
    ] = None,
) -> None:
    """Print one sample with special tokens highlighted and token boundaries visible."""
    from eyas.audit.data import load_table
    from eyas.audit.show import render_sample

    table = load_table(run)
    matches = [i for i, sid in enumerate(table.ids) if sid == id or sid.startswith(id)]
    if len(matches) != 1:
        _fail(f"{len(matches)} samples match {id!r}")
    model_dir = model or (table.manifest.get("render") or {}).get("model_dir")
    if not model_dir:
        _fail("no tokenizer: pass --model DIR")
    from eyas.render.renderer import load_tokenizer

    Console().print(render_sample(table, matches[0], load_tokenizer(model_dir)))


export_app = typer.Typer(no_args_is_help=True, help="Export drafters and samples.")
app.add_typer(export_app, name="export")


@app.command()
def train(
    target: Annotated[Path | None, typer.Option(help="target model directory")] = None,
    data: Annotated[
        Path | None, typer.Option(help="generate stage dir, Parquet or sample JSONL")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="output directory")] = None,
    steps: Annotated[int | None, typer.Option()] = None,
    ttt: Annotated[int | None, typer.Option(help="training-time-test steps")] = None,
    draft_vocab: Annotated[int | None, typer.Option()] = None,
    max_len: Annotated[int | None, typer.Option()] = None,
    lr: Annotated[float | None, typer.Option()] = None,
    batch_tokens: Annotated[int | None, typer.Option()] = None,
    config: Annotated[Path | None, typer.Option(help="train TOML (flags override it)")] = None,
) -> None:
    """Train an EAGLE-3 drafter with the target online; rerun to resume."""
    import tomllib

    from eyas.config import TrainConfig
    from eyas.train.loop import run_train

    values: dict = tomllib.loads(config.read_text()) if config else {}
    for key, value in (
        ("target", target),
        ("data", data),
        ("out", out),
        ("steps", steps),
        ("ttt", ttt),
        ("draft_vocab", draft_vocab),
        ("max_len", max_len),
        ("lr", lr),
        ("batch_tokens", batch_tokens),
    ):
        if value is not None:
            values[key] = value
    cfg = TrainConfig.model_validate(values)
    from rich.progress import Progress

    with Progress(console=console) as bar:
        task = bar.add_task("train", total=cfg.steps)

        def on_step(m: dict) -> None:
            acc = m["per_step_acc"][0]
            bar.update(
                task, completed=m["step"], description=f"train loss {m['loss']:.3f} acc0 {acc:.2f}"
            )

        path = run_train(cfg, log=console.print, on_step=on_step)
    console.print(f"drafter -> {path}")


@export_app.command("drafter")
def export_drafter_cmd(
    checkpoint: Annotated[Path, typer.Option(help="trained drafter dir (OUT/drafter)")],
    format: Annotated[str, typer.Option(help="sglang|vllm")],
    out: Annotated[Path, typer.Option()],
    target: Annotated[Path | None, typer.Option(help="target dir (default: from training)")] = None,
    speculative_tokens: Annotated[int, typer.Option(help="vllm: draft tokens per step")] = 3,
) -> None:
    """Export a drafter for SGLang or vLLM, then validate it."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import ExportError, check_export

    path = export_drafter(checkpoint, format, out, target, speculative_tokens)
    try:
        summary = check_export(path, target)
    except ExportError as exc:
        _fail(str(exc), 1)
    console.print(f"{format} export -> {path}; validated: {summary}")


@export_app.command("check")
def export_check_cmd(
    path: Annotated[Path, typer.Argument()],
    target: Annotated[
        Path | None, typer.Option(help="target dir (default: from the export)")
    ] = None,
) -> None:
    """Validate an exported drafter (tensors, shapes, dtypes, embedding, aux ids, positions)."""
    from eyas.export.validate import ExportError, check_export

    try:
        console.print(check_export(path, target))
    except ExportError as exc:
        _fail(str(exc), 1)


@export_app.command("samples")
def export_samples_cmd(
    input: Annotated[Path, typer.Argument(help="stage dir, Parquet or sample JSONL")],
    format: Annotated[str, typer.Option(help="specforge|speculators")],
    out: Annotated[Path, typer.Option(help="output JSONL")],
    include_truncated: Annotated[bool, typer.Option("--include-truncated")] = False,
) -> None:
    """Write samples for SpecForge or speculators with ids and loss masks intact."""
    from eyas.export.samples import export_samples

    console.print(export_samples(input, format, out, include_truncated))


@app.command("eval")
def eval_cmd(
    target: Annotated[Path, typer.Option(help="target model directory")],
    drafter: Annotated[Path, typer.Option(help="trained drafter dir (OUT/drafter)")],
    input: Annotated[Path, typer.Option(help="rendered prompts: prepare dir, JSONL or stage dir")],
    k: Annotated[int, typer.Option(help="draft tokens per verify step (chain)")] = 3,
    temperature: Annotated[float, typer.Option()] = 0.0,
    max_new_tokens: Annotated[int, typer.Option()] = 256,
    limit: Annotated[int | None, typer.Option(help="prompts per dataset")] = None,
    json_out: Annotated[Path | None, typer.Option("--json")] = None,
) -> None:
    """Acceptance length per dataset by lossless speculative decoding."""
    import json

    from eyas.evaluate.run import run_eval

    result = run_eval(target, drafter, input, k, temperature, max_new_tokens, limit)
    table = Table(
        "dataset",
        "prompts",
        "acceptance_length",
        "mean_accepted_drafts",
        "per_position",
        title=f"eval: chain K={k}, temperature {temperature}",
    )
    for name, d in result["datasets"].items():
        table.add_row(
            name,
            str(d["prompts"]),
            f"{d['acceptance_length']:.3f}",
            f"{d['mean_accepted_drafts']:.3f}",
            " ".join(f"{p:.2f}" for p in d["per_position"]),
        )
    table.add_row(
        "all",
        str(result["settings"]["prompts"]),
        f"{result['acceptance_length']:.3f}",
        f"{result['mean_accepted_drafts']:.3f}",
        " ".join(f"{p:.2f}" for p in result["per_position"]),
    )
    console.print(table)
    console.print("acceptance_length = tokens per target verify step, bonus included (SGLang)")
    if json_out:
        json_out.write_text(json.dumps(result, indent=2) + "\n")
    if result["lossless"] is False:
        console.print(f"[red]NOT LOSSLESS[/]: {result['lossless_mismatches'][:5]}")
        raise typer.Exit(1)


@app.command()
def quickstart(
    out: Annotated[Path, typer.Option(help="run directory")] = Path("runs/quickstart"),
    rows: Annotated[int, typer.Option(help="source rows per toy dataset")] = 60,
) -> None:
    """The toy world end to end on the embedded backend, plus the naive-rendering experiment."""
    from eyas.quickstart import run_quickstart

    result = run_quickstart(out, rows, console=console)
    if result["native_errors"] or not result["naive_tool_format"] or not result["lossless"]:
        raise typer.Exit(1)


@toy_app.command("build")
def toy_build(
    preset: Annotated[
        str, typer.Option(help="tiny (tests, ~1 min) | small (quickstart)")
    ] = "small",
    out: Annotated[Path | None, typer.Option(help="output dir (default: the user cache)")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    force: Annotated[bool, typer.Option("--force", help="rebuild even if cached")] = False,
) -> None:
    """Build (or reuse) the toy Kimi-format target model and print its quality figures."""
    import json
    import time

    from eyas.toy.build import build_toy, load_toy_info

    start = time.time()
    path = build_toy(
        preset,
        out,
        seed,
        log=lambda s: console.print(f"[{time.time() - start:5.0f}s] {s}"),
        force=force,
    )
    info = load_toy_info(path)
    console.print(f"toy target: {path}")
    console.print(json.dumps(info["quality"], indent=2))
    print(path)


@toy_app.command("datasets")
def toy_datasets(
    out: Annotated[Path, typer.Option(help="output directory")],
    rows: Annotated[int, typer.Option(help="rows per dataset")] = 200,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Write the eight toy source datasets (B1..B8), each in its original source format."""
    from eyas.toy.datasets import FAMILIES, write_datasets

    paths = write_datasets(out, rows, seed)
    table = Table("dataset", "source format", "kind", "file")
    for fam in FAMILIES:
        table.add_row(fam.name, fam.format, fam.kind, str(paths[fam.name]))
    console.print(table)


def main() -> None:  # pragma: no cover - console entry point
    sys.exit(app())


if __name__ == "__main__":  # `python -m eyas.cli`
    main()
