"""`eyas` eval: acceptance length, offline or served."""

from __future__ import annotations

import typer
from rich.table import Table

from eyas.cli_schema import Flag, schema_flags
from eyas.commands.common import ENGINE_FLAGS, console, server_flags, user_errors
from eyas.evaluate.config import EvalConfig


@user_errors
@schema_flags(
    EvalConfig,
    "target",
    "drafter",
    "input",
    "backend",
    *server_flags("server"),
    *ENGINE_FLAGS,
    "k",
    "topk",
    "num_draft_tokens",
    "temperature",
    "max_new_tokens",
    "limit",
    "baseline",
    Flag("baseline_urls", "--baseline-url"),
    "lossless_check",
    Flag("json_out", "--json"),
    "trust_remote_code",
    "bench",
    "published_config",
    Flag("html_out", "--html"),
)
def eval_cmd(cfg: EvalConfig) -> None:
    """Acceptance length per dataset: offline (lossless speculative decoding) or served."""
    import json

    from eyas.evaluate.run import run_eval

    result = run_eval(cfg, log=console.print)
    settings = result.settings
    shape = (
        f"chain K={cfg.k}"
        if settings.decoding == "chain"
        else f"tree depth {cfg.k}, topk {cfg.topk}, {settings.num_draft_tokens} draft tokens"
    )
    from eyas.evaluate.report import FIGURE_HEADER, figure_rows

    table = Table(
        *FIGURE_HEADER, title=f"eval ({cfg.backend}): {shape}, temperature {cfg.temperature}"
    )
    for row in figure_rows(result):
        table.add_row(*row)
    console.print(table)
    console.print("acceptance_length = tokens per target verify step, bonus included (SGLang)")
    if result.throughput:
        console.print(f"throughput: {result.throughput}")
    if result.model_card:
        from eyas.evaluate.report import card_rows

        header, rows = card_rows(result.model_card)
        card = Table(*header, title="model card: acceptance length per benchmark")
        for row in rows:
            card.add_row(*row)
        console.print(card)
        console.print(f"AL = {result.model_card.metric}")
    if cfg.json_out:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        cfg.json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    if cfg.html_out:
        from eyas.evaluate.report import write_eval_html

        console.print(f"report: {write_eval_html(result, cfg.html_out)}")
    if result.lossless is False:
        console.print(f"[red]NOT LOSSLESS[/]: {result.lossless_mismatches[:5]}")
        raise typer.Exit(1)
