"""The eval result as a model-card table (text rows) and an HTML page with the acceptance
charts (`eyas.evaluate.plots`: inline SVG, the page opens offline)."""

from __future__ import annotations

import html
from pathlib import Path

from eyas.evaluate.plots import acceptance_bars, charts_row, position_bars
from eyas.evaluate.result import EvalResult, EvalRun, ModelCard


def _al(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def card_rows(card: ModelCard) -> tuple[list[str], list[list[str]]]:
    """(header, rows): one row per benchmark (and thinking mode), one AL column per config."""
    header = ["benchmark", *(["thinking"] if card.thinking_switch else []), "prompts"]
    header += [f"AL @ {c}" for c in card.configurations] + ["not evaluated"]
    rows = []
    for r in card.rows:
        skipped = {**r.rejected, **r.follow_ups_stopped}
        line = [r.benchmark, *([r.thinking or "-"] if card.thinking_switch else [])]
        line.append(f"{r.prompts} / {r.rows} rows")
        line += [_al(r.acceptance_length[c]) for c in card.configurations]
        line.append(", ".join(f"{k} {v}" for k, v in sorted(skipped.items())) or "-")
        rows.append(line)
    return header, rows


FIGURE_HEADER = [
    "dataset",
    "prompts",
    "acceptance_length",
    "mean_accepted_drafts",
    "per_position",
    "acceptance_rate",
]


def _positions(values: list[float] | None) -> str:
    return "-" if not values else " ".join(f"{p:.2f}" for p in values)


def figure_rows(result: EvalRun) -> list[list[str]]:
    """The rows of the per-dataset table (`FIGURE_HEADER`): each dataset, each category
    (`category: chat`, ...) and `all`. `per_position` is P(draft i accepted | drafts before it
    accepted); `acceptance_rate` is P(draft i accepted), vLLM's and the model cards' figure
    (`eyas.evaluate.metrics`)."""
    named: list[tuple[str, int, object]] = [(n, d.prompts, d) for n, d in result.datasets.items()]
    named += [(f"category: {c}", f.prompts, f) for c, f in (result.categories or {}).items()]
    named.append(("all", result.settings.prompts, result))
    return [
        [
            name,
            str(prompts),
            f"{f.acceptance_length:.3f}",
            f"{f.mean_accepted_drafts:.3f}",
            _positions(f.per_position),
            _positions(f.acceptance_rate_per_position),
        ]
        for name, prompts, f in named
    ]


def write_eval_html(result: EvalResult, path: str | Path) -> Path:
    """The per-dataset figures and, for `--bench`, the model-card table."""
    path = Path(path)
    settings = result.settings
    parts = [
        f"<h1>eyas eval <small>{html.escape(result.drafter)}</small></h1>",
        f"<p>target {html.escape(result.target)} · backend "
        f"{html.escape(settings.backend)} · temperature "
        f"{settings.temperature} · lossless {result.lossless}</p>",
    ]
    card = result.model_card
    if card:
        header, rows = card_rows(card)
        parts.append("<h2>Model card</h2>")
        parts.append(_table(header, rows))
        parts.append(
            f"<p>{html.escape(card.metric)}. Published configuration: "
            f"{html.escape(card.published_configuration)} (SGLang flags; eyas chain K = 3)."
            "</p>"
        )
    parts.append("<h2>Per dataset and category (your configuration)</h2>")
    parts.append(acceptance_charts(result))
    parts.append(_table(FIGURE_HEADER, figure_rows(result)))
    parts.append(
        "<p>per_position: P(draft i accepted | drafts 1..i-1 accepted); acceptance_rate: "
        "P(draft i accepted), the share of verify steps whose draft i was accepted (vLLM's "
        "per-position acceptance rate, as model cards report it).</p>"
    )
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>eyas eval</title><style>'
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}</style></head><body>"
        + "\n".join(parts)
        + "</body></html>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path


def acceptance_charts(result: EvalRun) -> str:
    """Acceptance length per dataset and per category, and acceptance per draft position, as
    charts."""
    datasets = {n: d for n, d in result.datasets.items() if d.verify_steps}
    k = result.settings.k or max((len(d.per_position) for d in datasets.values()), default=1)
    lengths = {n: d.acceptance_length for n, d in datasets.items()}
    total = result.acceptance_length if len(lengths) > 1 else None
    positions = {n: d.per_position for n, d in datasets.items() if d.per_position}
    charts = [
        acceptance_bars(lengths, k, "acceptance length per dataset", total),
        position_bars(positions, "acceptance per draft position"),
    ]
    categories = {c: f for c, f in (result.categories or {}).items() if f.verify_steps}
    if categories:
        charts.insert(
            1,
            acceptance_bars(
                {c: f.acceptance_length for c, f in categories.items()},
                k,
                "acceptance length per category",
                result.acceptance_length if len(categories) > 1 else None,
            ),
        )
    return charts_row(*charts)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"
