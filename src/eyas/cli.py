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
