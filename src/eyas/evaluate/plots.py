"""Acceptance charts as inline SVG: the HTML reports stay one self-contained file that opens
offline (no script, no stylesheet or font fetched).

- `acceptance_bars`: acceptance length per dataset (or per drafter), one horizontal bar each,
  on an axis from 1 (nothing accepted) to K + 1 (every draft accepted);
- `position_bars`: acceptance per draft position, P(draft i accepted | 1..i-1 were), grouped
  by position with one bar per dataset (or drafter) and a legend;
- `line_chart`: one line per name through (x, y) points (a learning curve: acceptance
  length against steps or training time).

Each chart is an `<svg class="plot">` with a `<title>` per bar giving its value, so the figure
is readable on hover and by a screen reader as well as in the tables beside it.
"""

from __future__ import annotations

import html

# Paul Tol's "bright" qualitative palette (colour-blind safe), then greys
PALETTE = (
    "#4477aa",
    "#ee6677",
    "#228833",
    "#ccbb44",
    "#66ccee",
    "#aa3377",
    "#bbbbbb",
    "#332288",
    "#999933",
    "#882255",
)
AXIS = "#555555"
GRID = "#dddddd"


# the charts side by side, whatever page they are in (the eval report, the quickstart's)
ROW_STYLE = "display:flex;flex-wrap:wrap;gap:16px;margin:8px 0"


def charts_row(*charts: str) -> str:
    return f'<div class="plots" style="{ROW_STYLE}">' + "".join(c for c in charts if c) + "</div>"


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _svg(width: int, height: int, title: str, body: str) -> str:
    return (
        f'<svg class="plot" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'font-family="sans-serif" font-size="11"><title>{html.escape(title)}</title>'
        f"{body}</svg>"
    )


def _legend(names: list[str], left: float, plot_w: float, base: float, row: int) -> str:
    """A swatch and a name per series, three to a row, from `base` down."""
    parts = []
    for i, name in enumerate(names):
        lx, ly = left + (i % 3) * (plot_w / 3), base + (i // 3) * row
        parts.append(
            f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{color(i)}"/>'
            f'<text x="{lx + 14:.1f}" y="{ly}">{html.escape(name)}</text>'
        )
    return "".join(parts)


def acceptance_bars(
    values: dict[str, float],
    k: int,
    title: str,
    total: float | None = None,
    width: int = 560,
) -> str:
    """One horizontal bar per name, its length the acceptance length on [1, K + 1]; `total`
    (the figure over all names) is a last, grey bar labelled "all"."""
    if not values:
        return ""
    label_w, row_h, top, bottom = 150, 20, 24, 34
    plot_w = width - label_w - 50
    bars = [(name, value, color(i)) for i, (name, value) in enumerate(values.items())]
    if total is not None:
        bars.append(("all", total, AXIS))
    height = top + row_h * len(bars) + bottom
    lo, hi = 1.0, float(k + 1)

    def x(v: float) -> float:
        return label_w + plot_w * (min(max(v, lo), hi) - lo) / (hi - lo)

    parts = [f'<text x="{label_w}" y="14" font-weight="bold">{html.escape(title)}</text>']
    for t in range(1, k + 2):  # grid and axis labels at every whole token
        parts.append(
            f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" '
            f'y2="{height - bottom + 4}" stroke="{GRID}"/>'
            f'<text x="{x(t):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
            f'fill="{AXIS}">{t}</text>'
        )
    for i, (name, value, fill) in enumerate(bars):
        y = top + i * row_h
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end">{html.escape(name)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{x(value) - label_w:.1f}" '
            f'height="{row_h - 6}" fill="{fill}"><title>{html.escape(name)}: '
            f"{value:.3f}</title></rect>"
            f'<text x="{x(value) + 4:.1f}" y="{y + 14}">{value:.2f}</text>'
        )
    parts.append(
        f'<text x="{label_w + plot_w / 2:.0f}" y="{height - 1}" text-anchor="middle" '
        f'fill="{AXIS}">tokens per verify step (1 to K + 1 = {k + 1})</text>'
    )
    return _svg(width, height, title, "".join(parts))


def position_bars(rates: dict[str, list[float]], title: str, width: int = 560) -> str:
    """Per draft position, one bar per name: the conditional acceptance rate on [0, 1]."""
    k = max((len(r) for r in rates.values()), default=0)
    if not k:
        return ""
    left, top, plot_h, legend_row = 36, 24, 150, 16
    legend_h = legend_row * ((len(rates) + 2) // 3)
    height = top + plot_h + 48 + legend_h
    plot_w = width - left - 10
    group_w = plot_w / k
    bar_w = min(18.0, max(2.0, (group_w - 12) / len(rates)))  # narrow bars, groups centred

    def y(v: float) -> float:
        return top + plot_h * (1 - min(max(v, 0.0), 1.0))

    parts = [f'<text x="{left}" y="14" font-weight="bold">{html.escape(title)}</text>']
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(
            f'<line x1="{left}" y1="{y(t):.1f}" x2="{width - 10}" y2="{y(t):.1f}" '
            f'stroke="{GRID}"/><text x="{left - 4}" y="{y(t) + 4:.1f}" text-anchor="end" '
            f'fill="{AXIS}">{t:g}</text>'
        )
    for pos in range(k):
        gx = left + pos * group_w + (group_w - bar_w * len(rates)) / 2
        for i, (name, r) in enumerate(rates.items()):
            if pos >= len(r):
                continue
            parts.append(
                f'<rect x="{gx + i * bar_w:.1f}" y="{y(r[pos]):.1f}" width="{bar_w - 1:.1f}" '
                f'height="{top + plot_h - y(r[pos]):.1f}" fill="{color(i)}"><title>'
                f"{html.escape(name)}, draft {pos + 1}: {r[pos]:.3f}</title></rect>"
            )
        parts.append(
            f'<text x="{left + (pos + 0.5) * group_w:.1f}" y="{top + plot_h + 14}" '
            f'text-anchor="middle" fill="{AXIS}">draft {pos + 1}</text>'
        )
    parts.append(_legend(list(rates), left, plot_w, top + plot_h + 46, legend_row))
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 28}" text-anchor="middle" '
        f'fill="{AXIS}">P(draft i accepted | drafts 1..i-1 accepted)</text>'
    )
    return _svg(width, height, title, "".join(parts))


def line_chart(
    series: dict[str, list[tuple[float, float]]],
    title: str,
    x_label: str,
    y_label: str,
    width: int = 560,
    height: int = 300,
) -> str:
    """One line per name through its (x, y) points, a marker at each point (its `<title>` the
    values), axes from 0 (x) and from the lowest y to the highest, and a legend."""
    points = [p for pts in series.values() for p in pts]
    if not points:
        return ""
    left, top, right, legend_row = 48, 24, 28, 16
    legend_h = legend_row * ((len(series) + 2) // 3)
    plot_w, plot_h = width - left - right, height - top - 44 - legend_h
    x_hi = max(x for x, _ in points) or 1.0
    y_lo, y_hi = min(y for _, y in points), max(y for _, y in points)
    if y_hi - y_lo < 1e-9:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    pad = 0.05 * (y_hi - y_lo)
    y_lo, y_hi = y_lo - pad, y_hi + pad

    def px(v: float) -> float:
        return left + plot_w * v / x_hi

    def py(v: float) -> float:
        return top + plot_h * (1 - (v - y_lo) / (y_hi - y_lo))

    parts = [f'<text x="{left}" y="14" font-weight="bold">{html.escape(title)}</text>']
    for i in range(5):  # four intervals on each axis
        yv, xv = y_lo + (y_hi - y_lo) * i / 4, x_hi * i / 4
        parts.append(
            f'<line x1="{left}" y1="{py(yv):.1f}" x2="{left + plot_w}" y2="{py(yv):.1f}" '
            f'stroke="{GRID}"/><text x="{left - 4}" y="{py(yv) + 4:.1f}" text-anchor="end" '
            f'fill="{AXIS}">{yv:.2f}</text>'
            f'<text x="{px(xv):.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
            f'fill="{AXIS}">{xv:,.0f}</text>'
        )
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(
            f'<polyline points="{path}" fill="none" stroke="{color(i)}" stroke-width="2"/>'
        )
        for x, y in pts:
            parts.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color(i)}"><title>'
                f"{html.escape(name)}: {x:,.0f}, {y:.3f}</title></circle>"
            )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 28}" text-anchor="middle" '
        f'fill="{AXIS}">{html.escape(x_label)}</text>'
        f'<text x="12" y="{top + plot_h / 2:.0f}" text-anchor="middle" fill="{AXIS}" '
        f'transform="rotate(-90 12 {top + plot_h / 2:.0f})">{html.escape(y_label)}</text>'
    )
    parts.append(_legend(list(series), left, plot_w, top + plot_h + 44, legend_row))
    return _svg(width, height, title, "".join(parts))
