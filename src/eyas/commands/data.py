"""`eyas` convert, render, prepare and generate: text in, samples out."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from eyas.cli_schema import Arg, Flag, schema_flags
from eyas.commands.common import (
    MODEL_FLAGS,
    console,
    model_renderer,
    run_line,
    server_flags,
    user_errors,
)
from eyas.config import ConvertConfig, RenderConfig
from eyas.errors import EyasError
from eyas.generate.config import PipelineConfig


@user_errors
@schema_flags(ConvertConfig, Arg("input"), Arg("output"), "format", "dataset")
def convert(cfg: ConvertConfig) -> None:
    """Convert a source dataset to canonical conversations with structured tools."""
    from eyas.jsonl import plain_name
    from eyas.sources.run import convert_file, errors_path

    output = cfg.output
    dataset = cfg.dataset or Path(plain_name(cfg.input)).stem  # x.jsonl.gz -> x
    result = convert_file(cfg.input, output, cfg.format, dataset)
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
    if not result.num_converted:
        why = dict(result.reasons.most_common()) or "the file holds no rows"
        raise EyasError("no_rows", f"{cfg.input}: no row converted ({why})")


@user_errors
@schema_flags(RenderConfig, Arg("input"), Arg("output"), *MODEL_FLAGS)
def render(cfg: RenderConfig) -> None:
    """Render prompts with the model's own chat template (tools passed as structured tools=)."""
    from eyas.render.run import render_file

    output = cfg.output
    renderer = model_renderer(cfg.model)
    result = render_file(renderer, cfg.input, output)
    probe = result.probe
    console.print(
        f"profile {renderer.model_format.name}; tools {probe['declaration_style']}; default "
        f"system prompt {'injected' if probe['default_system_injected'] else 'none'}; "
        f"prefix-stable {probe['prefix_stable']}"
    )
    console.print(f"{result.num_rendered} prompts -> {output}; manifest {result.manifest_path}")
    for reason, n in result.reasons.most_common():
        console.print(f"  rejected {n}: {reason}")


@user_errors
@schema_flags(PipelineConfig, *MODEL_FLAGS, reads=("datasets.*.path",))
def prepare(cfg: PipelineConfig) -> None:
    """Convert and render every dataset of a pipeline config."""
    from eyas.generate.prepare import prepare as run_prepare

    renderer = model_renderer(cfg.model)
    summary = run_prepare(cfg, renderer)
    table = Table("dataset", "format", "converted", "rejected", "rendered", title="prepare")
    for name, s in summary.items():
        table.add_row(name, s.format, str(s.converted), str(s.rejected), str(s.rendered))
    console.print(table)
    console.print(f"-> {cfg.stage_dir('prepare')}")
    for ds in cfg.datasets:
        if not summary[ds.name].converted:
            reasons = summary[ds.name].convert_reasons
            raise EyasError(
                "no_rows", f"{ds.path}: no row of dataset {ds.name} converted {reasons}"
            )


@user_errors
@schema_flags(
    PipelineConfig,
    *MODEL_FLAGS,
    Flag("generate.input"),
    Flag("generate.out"),
    Flag("backend.kind", "--backend"),
    *server_flags("backend"),
    Flag("engine.batch_size", "--batch-size"),
    Flag("generate.max_new_tokens"),
    Flag("sampling.temperature"),
    Flag("generate.multi_turn"),
    Flag("generate.shard"),
    Flag("generate.shard_size"),
    Flag("generate.progress"),
    reads=("generate.input",),
)
def generate(cfg: PipelineConfig) -> None:
    """Regenerate responses with exact token ids; resumable (rerun to resume)."""
    from eyas.generate.run import run_generate

    if not cfg.generate_input.exists():  # the default: this run's prepare stage
        raise EyasError("no_input", f"{cfg.generate_input} does not exist (run eyas prepare)")
    renderer = model_renderer(cfg.model)
    result = run_generate(cfg, renderer, cfg.generate.progress)
    run = result.this_run
    out = cfg.generate_out
    console.print(
        f"{run.samples_written} samples written, {run.failed} failed, {run.retries} "
        f"retries, skipped {run.skipped}; {result.counts.samples} samples in {out}"
    )
    if run.failure_reasons:
        console.print(f"failure reasons: {run.failure_reasons} (see {out / 'errors.jsonl'})")
    run_line(result.run)
    if not result.complete:
        if result.stopped_reason == "terminated":
            console.print("[yellow]terminated (SIGTERM): rerun the same command to resume[/]")
            raise typer.Exit(143)
        if result.stopped_reason != "interrupted":
            console.print(
                f"[red]stopped: {result.stopped_reason}[/]; fix the servers and rerun "
                "the same command to resume"
            )
            raise typer.Exit(1)
        console.print("[yellow]interrupted: rerun the same command to resume[/]")
        raise typer.Exit(130)
