"""Audit output: a terminal table per dataset, JSON, and one self-contained HTML file."""

from __future__ import annotations

import html
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from eyas import __version__
from eyas.audit.run import AuditResult, LengthStats

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def _kind(f) -> str:
    return "systemic" if f.systemic else "samples"


def verdict_line(result: AuditResult) -> str:
    """PASS / FAIL / INCOMPLETE with what decided it (plain text)."""
    quarantined = len({r["id"] for r in result.quarantine})
    if result.verdict == "FAIL":
        return f"FAIL: {result.num_errors} systemic error(s); {quarantined} samples quarantined"
    if result.verdict == "INCOMPLETE":
        return (
            f"INCOMPLETE: {len(result.skipped)} checks skipped without a tokenizer "
            f"({', '.join(sorted(result.skipped))}); pass --model DIR"
        )
    return f"PASS: {quarantined} samples quarantined (training skips them)"


def print_summary(result: AuditResult, console: Console) -> None:
    by_dataset = defaultdict(list)
    for f in result.findings:
        by_dataset[f.dataset].append(f)
    overview = Table(
        "dataset",
        "samples",
        "prompt p50",
        "output p50",
        "output p99",
        "finish",
        "quarantined",
        "systemic errors",
        title=f"audit: {result.table.source}",
    )
    for name, d in result.dataset_profiles().items():
        fs = by_dataset[name]
        overview.add_row(
            name,
            str(d.samples),
            f"{d.prompt.median:.0f}",
            f"{d.output.median:.0f}",
            f"{d.output.p99:.0f}",
            " ".join(f"{k}:{v}" for k, v in sorted(d.finish_reasons.items())),
            f"{d.quarantined_share:.1%}",
            str(sum(f.severity == "error" and f.systemic for f in fs)),
        )
    console.print(overview)
    table = Table(
        "check", "severity", "kind", "dataset", "count", "message", "examples", title="findings"
    )
    for f in result.findings:
        if f.reason == "distribution":
            continue
        table.add_row(
            f.check,
            f"[{_STYLE[f.severity]}]{f.severity}[/]",
            _kind(f),
            f.dataset,
            f"{f.count}/{f.total}",
            f.message,
            ", ".join(e[:12] for e in f.examples[:2]),
        )
    console.print(table)
    style = {"PASS": "bold green", "FAIL": "bold red", "INCOMPLETE": "bold yellow"}
    console.print(
        f"[{style[result.verdict]}]{verdict_line(result)}[/] ({len(result.table)} samples, "
        f"profile {result.profile}, {result.seconds:.1f}s)"
    )


def _examples_html(f) -> str:
    """Example ids, each with what was found in it (e.g. a loop's repeated span)."""
    details = f.data.get("details") or {}
    out = []
    for e in f.examples:
        line = f"<code>{html.escape(e)}</code>"
        if e in details:
            line += f'<br><span class="detail">{html.escape(details[e])}</span>'
        out.append(line)
    return "<br>".join(out)


def _histogram_svg(stats: LengthStats, color: str, width: int = 320, height: int = 90) -> str:
    counts, edges = stats.histogram_counts, stats.histogram_edges
    if not counts:
        return ""
    peak = max(counts) or 1
    bar_w = width / len(counts)
    bars = "".join(
        f'<rect x="{k * bar_w:.1f}" y="{height - 14 - (c / peak) * (height - 20):.1f}" '
        f'width="{bar_w - 1:.1f}" height="{(c / peak) * (height - 20):.1f}" fill="{color}">'
        f"<title>{edges[k]:.0f}-{edges[k + 1]:.0f}: {c}</title></rect>"
        for k, c in enumerate(counts)
    )
    labels = (
        f'<text x="0" y="{height - 2}" font-size="10">{edges[0]:.0f}</text>'
        f'<text x="{width}" y="{height - 2}" font-size="10" text-anchor="end">'
        f"{edges[-1]:.0f}</text>"
    )
    return f'<svg width="{width}" height="{height}">{bars}{labels}</svg>'


def _finish_bars(finishes: dict[str, int]) -> str:
    total = sum(finishes.values()) or 1
    colors = {"stop": "#3a7", "length": "#d93", "abort": "#c33"}
    parts = "".join(
        f'<div style="width:{100 * n / total:.1f}%;background:{colors.get(k, "#888")}" '
        f'title="{html.escape(k)}: {n}">{html.escape(k)} {n}</div>'
        for k, n in sorted(finishes.items())
    )
    return f'<div class="bar">{parts}</div>'


def write_html(
    result: AuditResult, path: str | Path, extra_html: str = "", title: str = "eyas audit"
) -> Path:
    """The report; `extra_html` (already escaped) is appended, e.g. the quickstart's eval,
    and `title` names the page (the quickstart's report is more than an audit)."""
    rows = []
    for f in result.findings:
        if f.reason == "distribution":
            continue
        rows.append(
            f'<tr class="{f.severity}"><td>{html.escape(f.check)}</td><td>{f.severity}</td>'
            f"<td>{_kind(f)}</td><td>{html.escape(f.dataset)}</td><td>{f.count}/{f.total}</td>"
            f"<td>{html.escape(f.message)}</td><td>{_examples_html(f)}</td></tr>"
        )
    cards = []
    for name, d in result.dataset_profiles().items():
        cards.append(
            f'<div class="card"><h3>{html.escape(name)} <small>{d.samples} samples</small></h3>'
            f"<p>prompt tokens (median {d.prompt.median:.0f}, p99 "
            f"{d.prompt.p99:.0f})</p>{_histogram_svg(d.prompt, '#58c')}"
            f"<p>output tokens (median {d.output.median:.0f}, p99 "
            f"{d.output.p99:.0f}, {d.output.share_under_500:.0%} under 500)"
            f"</p>{_histogram_svg(d.output, '#c85')}"
            f"<p>finish reasons</p>{_finish_bars(d.finish_reasons)}"
            f"<p>quarantined: {d.quarantined_share:.1%}</p></div>"
        )
    verdict = html.escape(verdict_line(result))
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#222}}
table{{border-collapse:collapse;width:100%;font-size:13px}}
td,th{{border:1px solid #ddd;padding:4px 6px;vertical-align:top}}
tr.error td{{background:#fde8e8}} tr.warning td{{background:#fff6dd}} tr.info td{{color:#666}}
.cards{{display:flex;flex-wrap:wrap;gap:12px}} .card{{border:1px solid #ddd;padding:8px;width:340px}}
.bar{{display:flex;height:18px;font-size:11px;color:#fff;overflow:hidden}}
.bar div{{overflow:hidden;white-space:nowrap;padding-left:2px}}
h1 small,h3 small{{color:#888;font-weight:normal}}
.detail{{font-family:monospace;white-space:pre-wrap;color:#555}}
</style></head><body>
<h1>{html.escape(title)} <small>{html.escape(result.table.source)}</small></h1>
<p><b>{verdict}</b> · {len(result.table)} samples · profile {html.escape(result.profile)} ·
eyas {__version__}</p>
<h2>Datasets</h2><div class="cards">{"".join(cards)}</div>
<h2>Findings</h2><table><tr><th>check</th><th>severity</th><th>kind</th><th>dataset</th><th>count</th>
<th>message</th><th>example ids</th></tr>{"".join(rows)}</table>
{extra_html}
</body></html>"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page)
    return path
