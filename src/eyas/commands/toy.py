"""`eyas` quickstart and the toy world."""

from __future__ import annotations

import typer
from rich.table import Table

from eyas.cli_schema import schema_flags
from eyas.commands.common import console, user_errors
from eyas.config import QuickstartConfig, ToyBuildConfig, ToyDatasetsConfig


@user_errors
@schema_flags(QuickstartConfig, "out", "rows")
def quickstart(cfg: QuickstartConfig) -> None:
    """The toy world end to end on the embedded backend, plus the naive-rendering experiment."""
    from eyas.quickstart import run_quickstart

    result = run_quickstart(cfg.out, cfg.rows, console=console)
    if result.failures:
        for failure in result.failures:
            console.print(f"[bold red]quickstart check failed:[/] {failure}")
        raise typer.Exit(1)


@user_errors
@schema_flags(ToyBuildConfig, "preset", "out", "seed", "force")
def toy_build(cfg: ToyBuildConfig) -> None:
    """Build (or reuse) the toy Kimi-format target model and print its quality figures."""
    import json
    import time

    from eyas.toy.build import build_toy, load_toy_info

    start = time.time()
    path = build_toy(
        cfg.preset,
        cfg.out,
        cfg.seed,
        log=lambda s: console.print(f"[{time.time() - start:5.0f}s] {s}"),
        force=cfg.force,
    )
    info = load_toy_info(path)
    console.print(f"toy target: {path}")
    console.print(json.dumps(info["quality"], indent=2))
    print(path)


@user_errors
@schema_flags(ToyDatasetsConfig, "out", "rows", "seed")
def toy_datasets(cfg: ToyDatasetsConfig) -> None:
    """Write the eight toy source datasets (B1..B8), each in its original source format."""
    from eyas.toy.datasets import FAMILIES, write_datasets

    paths = write_datasets(cfg.out, cfg.rows, cfg.seed)
    table = Table("dataset", "source format", "kind", "file")
    for fam in FAMILIES:
        table.add_row(fam.name, fam.format, fam.kind, str(paths[fam.name]))
    console.print(table)
