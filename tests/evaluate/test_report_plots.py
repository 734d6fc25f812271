"""The acceptance charts of the eval and quickstart reports: the SVG encodes the figures, the
page fetches nothing, and a real browser (headless Chromium, the Debian `chromium` package;
`.ci/run` installs it) draws them: the screenshot shows each dataset's bar, its length in
proportion to the acceptance length, and nothing of the kind once the charts are removed."""

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from eyas.evaluate.plots import PALETTE
from eyas.evaluate.report import acceptance_charts, write_eval_html
from eyas.evaluate.result import DatasetFigures, EvalResult, EvalSettings, Figures, FollowUpsInfo

K = 3
DATASETS = {
    "b1_glaive": {"acceptance_length": 1.5, "per_position": [0.4, 0.2, 0.1]},
    "b4_sharegpt": {"acceptance_length": 2.25, "per_position": [0.7, 0.5, 0.3]},
    "b7_code": {"acceptance_length": 3.5, "per_position": [0.95, 0.8, 0.7]},
}


def _result(figures: dict = DATASETS) -> EvalResult:
    datasets = {
        name: DatasetFigures(
            prompts=4,
            verify_steps=40,
            acceptance_length=d["acceptance_length"],
            mean_accepted_drafts=d["acceptance_length"] - 1,
            per_position=d["per_position"],
            histogram=None,
        )
        for name, d in figures.items()
    }
    settings = EvalSettings("local", K, "chain", 1, K, 0.0, 1, 64, 12, "AL")
    return EvalResult(
        drafter="runs/x/drafter",
        target="toy",
        eyas_version="0",
        settings=settings,
        lossless=True,
        lossless_mismatches=[],
        acceptance_length=2.4,
        mean_accepted_drafts=1.4,
        verify_steps=120,
        per_position=[],
        histogram=None,
        datasets=datasets,
        follow_ups=FollowUpsInfo(None, [12], {}, {}),
    )


def _rects(svg: str) -> dict[str, tuple[float, float]]:
    """bar title -> (width, height) of every bar of a chart."""
    out = {}
    for m in re.finditer(
        r'<rect [^>]*width="([\d.]+)" height="([\d.]+)"[^>]*><title>([^<]+)</', svg
    ):
        out[m.group(3)] = (float(m.group(1)), float(m.group(2)))
    return out


def test_the_charts_encode_the_figures():
    svg = acceptance_charts(_result())
    bars = _rects(svg)
    widths = {
        name: bars[f"{name}: {d['acceptance_length']:.3f}"][0] for name, d in DATASETS.items()
    }
    # a bar's length is acceptance length - 1 on a 1..K+1 axis: lengths in proportion
    for name, d in DATASETS.items():
        assert widths[name] / widths["b7_code"] == pytest.approx(
            (d["acceptance_length"] - 1) / (3.5 - 1), abs=0.01
        )
    assert "all: 2.400" in bars  # the figure over every dataset, its own bar
    for name, d in DATASETS.items():
        heights = [
            bars[f"{name}, draft {i + 1}: {p:.3f}"][1] for i, p in enumerate(d["per_position"])
        ]
        top = bars[f"b7_code, draft 1: {0.95:.3f}"][1]
        assert [h / top for h in heights] == pytest.approx(
            [p / 0.95 for p in d["per_position"]], abs=0.01
        )


def test_the_report_is_one_file_that_fetches_nothing(tmp_path):
    page = write_eval_html(_result(), tmp_path / "e.html").read_text()
    assert page.count('<svg class="plot"') == 2
    for fetching in ("<script", "<link", "src=", "http:", "https:", "@import", "url("):
        assert fetching not in page, fetching


# -- in a browser ---------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        pytest.fail("headless Chromium is needed: apt-get install chromium (.ci/run does)")
    return found


def screenshot(page: Path, out: Path, size: tuple[int, int] = (900, 1100)) -> Path:
    profile = out.with_suffix(".profile")
    profile.mkdir()
    cmd = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
        f"--screenshot={out}",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and out.exists(), proc.stderr[-2000:]
    return out


def read_png(path: Path) -> np.ndarray:
    """[height, width, 3] RGB of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium
    writes), decoded with zlib and numpy (the PNG filters of RFC 2083, section 6)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, color_type, _, _, interlace = header
    assert depth == 8 and color_type in (2, 6) and interlace == 0, header
    ch = 3 if color_type == 2 else 4
    raw, stride = zlib.decompress(idat), width * ch
    rows, prev = [], np.zeros(stride, np.uint8)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).copy()
        if kind == 1:  # sub: a running sum per channel
            line = (np.cumsum(line.reshape(-1, ch), axis=0, dtype=np.int64) % 256).astype(np.uint8)
            line = line.ravel()
        elif kind == 2:  # up
            line = line + prev
        elif kind in (3, 4):  # average, Paeth: pixel after pixel
            out, up = bytearray(line.tobytes()), prev.tobytes()
            for x in range(stride):
                a = out[x - ch] if x >= ch else 0
                b, c = up[x], (up[x - ch] if x >= ch else 0)
                if kind == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                out[x] = (out[x] + pred) & 255
            line = np.frombuffer(bytes(out), np.uint8)
        rows.append(line)
        prev = line
    return np.stack(rows).reshape(height, width, ch)[:, :, :3]


def longest_runs(image: np.ndarray, colors: list[str]) -> dict[str, int]:
    """Per colour, the longest horizontal run of pixels of exactly that colour."""
    out = {}
    for hex_color in colors:
        mask = np.all(image == np.frombuffer(bytes.fromhex(hex_color[1:]), np.uint8), axis=2)
        edges = np.diff(np.pad(mask, ((0, 0), (1, 1))).astype(np.int8), axis=1)
        starts, ends = np.argwhere(edges == 1), np.argwhere(edges == -1)
        out[hex_color] = int((ends[:, 1] - starts[:, 1]).max()) if len(starts) else 0
    return out


def test_the_eval_report_shows_its_charts_in_chromium(tmp_path):
    page = write_eval_html(_result(), tmp_path / "eval.html")
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r'<svg class="plot".*?</svg>', "", page.read_text(), flags=re.S))
    colors = list(PALETTE[: len(DATASETS)])
    shot = read_png(screenshot(page, tmp_path / "eval.png"))
    runs = longest_runs(shot, colors)
    bare_runs = longest_runs(read_png(screenshot(bare, tmp_path / "bare.png")), colors)
    assert all(n == 0 for n in bare_runs.values()), bare_runs  # the colours are the charts'
    # each dataset's bar is drawn, its on-screen length in proportion to its AL - 1 (the
    # longest run of a dataset's colour is its AL bar: draft bars are at most 18 px wide)
    lengths = {c: d["acceptance_length"] - 1 for c, d in zip(colors, DATASETS.values())}
    longest = max(lengths, key=lengths.get)
    assert runs[longest] > 100, runs
    for c, length in lengths.items():
        assert runs[c] / runs[longest] == pytest.approx(length / lengths[longest], abs=0.03)


def test_the_quickstart_report_is_titled_and_charts_the_ab(tmp_path, toy_tiny, toy_samples):
    from eyas.audit import AuditOptions, run_audit
    from eyas.audit.report import write_html
    from eyas.quickstart import REPORT_TITLE, _eval_html

    audit = run_audit(toy_samples, toy_tiny, AuditOptions())
    ab = {
        name: Figures(
            verify_steps=40,
            acceptance_length=al,
            mean_accepted_drafts=al - 1,
            per_position=pos,
            histogram=None,
        )
        for name, al, pos in (
            ("b1_native", 3.2, [0.9, 0.8, 0.6]),
            ("b1_naive", 1.6, [0.4, 0.2, 0.1]),
        )
    }
    # per dataset short bars, so that each colour's longest run on the page is an A/B bar
    low = {n: {**d, "acceptance_length": 1.2} for n, d in DATASETS.items()}
    evals = {"native": _result(low)}
    page = write_html(audit, tmp_path / "report.html", _eval_html(evals, ab), REPORT_TITLE)
    text = page.read_text()
    assert f"<title>{REPORT_TITLE}</title>" in text and "<title>eyas audit</title>" not in text
    assert text.count('<svg class="plot"') == 4  # per dataset, per position, and the A/B's two
    bars = _rects(text)
    assert bars["trained on native data: 3.200"][0] / bars["trained on naive data: 1.600"][0] == (
        pytest.approx((3.2 - 1) / (1.6 - 1), abs=0.01)
    )
    # the page is long (the audit comes first): a tall window, and the A/B bars are drawn
    runs = longest_runs(read_png(screenshot(page, tmp_path / "q.png", (1000, 6000))), PALETTE[:2])
    assert runs[PALETTE[1]] > 0 and runs[PALETTE[0]] / runs[PALETTE[1]] == pytest.approx(
        (3.2 - 1) / (1.6 - 1), abs=0.05
    )
