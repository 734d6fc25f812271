"""The generated benchmark page and the README's headline table match bench/results/*.json,
and every doc is reachable from the README."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = "run `python bench/benchmarks_doc.py` and commit docs/benchmarks.md and README.md"


def _doc_module():
    spec = importlib.util.spec_from_file_location(
        "benchmarks_doc", ROOT / "bench/benchmarks_doc.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_benchmarks_page_is_current() -> None:
    bd = _doc_module()
    committed = (ROOT / "docs/benchmarks.md").read_text()
    assert committed == bd.render_doc(), f"docs/benchmarks.md is stale: {FIX}"


def test_readme_headline_is_current() -> None:
    bd = _doc_module()
    readme = (ROOT / "README.md").read_text()
    assert readme == bd.render_readme(readme), f"README.md's headline table is stale: {FIX}"


def test_every_results_file_has_a_section() -> None:
    page = (ROOT / "docs/benchmarks.md").read_text()
    for path in sorted((ROOT / "bench/results").glob("*.json")):
        assert f"`bench/results/{path.name}`" in page, f"{path.name} has no section: {FIX}"


def test_readme_methods_paragraph_is_current() -> None:
    """ "Which method wins where" is generated from bench_methods' results, never hand-written."""
    bd = _doc_module()
    readme = (ROOT / "README.md").read_text()
    assert bd.METHODS_START in readme, f"README.md has no methods paragraph: {FIX}"
    assert readme == bd.render_readme(readme), f"README.md's methods paragraph is stale: {FIX}"
    paragraph = bd.render_methods_summary()
    results = json.loads((ROOT / "bench/results/methods.json").read_text())["results"]
    for row in results.values():  # every method's figure is in the paragraph as rendered
        assert bd.num(row["offline"]["acceptance_length"]) in paragraph, row["method"]


def test_every_headline_figure_is_in_its_results_file() -> None:
    """Each figure of the headline table appears (as rendered) in the file its row names."""
    bd = _doc_module()
    for row in bd.headline_rows():
        data = json.loads((ROOT / "bench/results" / row[4]).read_text())
        rendered = {bd.num(v) for v in _leaves(data)}
        for cell in row[1:3]:
            for figure in re.findall(r"\d[\d,]*(?:\.\d+)?", cell):
                assert figure in rendered, f"{figure} ({cell!r}) is not a figure of {row[4]}"


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield value


def test_renderers_cover_a_new_file_and_a_changed_one(tmp_path: Path) -> None:
    """A file no renderer knows gets the generic section (command or its absence, load,
    figures); a known bench whose layout changed says its renderer failed instead of
    dropping the file."""
    bd = _doc_module()
    (tmp_path / "inflight.json").write_text(
        json.dumps(
            {
                "command": "bench/bench_x.py --n 3",
                "load_average": [3.5, 2, 1],
                "tokens_per_s": 1234.4,
                "rows": [{"n": 1, "s": {"p50": 0.5}}, {"n": 2, "s": {"p50": 0.25}, "note": "x"}],
                "totals": {"ok": 3},
            }
        )
    )
    (tmp_path / "newer.json").write_text(
        json.dumps(
            {
                "command": "python bench/bench_audit.py --samples 9",
                "load_average_before": [7.25, 1, 1],
                "load_average_after": [9.0, 1, 1],
                "kv_arithmetic": {"bytes": 70272},
            }
        )
    )
    (tmp_path / "capture.json").write_text(json.dumps({"bench": "capture", "samples": 7}))
    page = bd.render_doc(tmp_path)
    # an interpreter before the script is not doubled, and the script is found from it
    assert "Command: `python bench/bench_audit.py --samples 9`." in page
    assert "From `bench/results/newer.json`, written by `bench/bench_audit.py`." in page
    assert "load average (1 min) 7.2 at the start, 9.0 at the end" in page
    assert "`kv_arithmetic` (arithmetic, not measured):" in page
    assert "Command: `python bench/bench_x.py --n 3`." in page
    assert "load average (1 min) 3.5 at the start" in page
    assert "| `tokens_per_s` | 1,234 |" in page  # a figure over 1,000 loses its decimals
    assert "| n | s.p50 | note |\n|---|---|---|\n| 1 | 0.5 | – |\n| 2 | 0.25 | x |" in page
    assert "`totals`:\n\n| figure | value |\n|---|---|\n| `ok` | 3 |" in page
    assert "The `r_capture` renderer could not read this file (KeyError" in page
    assert "| `samples` | 7 |" in page
    assert "Command not recorded" in page


@pytest.mark.parametrize("doc", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_every_doc_is_listed_in_the_readme(doc: str) -> None:
    readme = (ROOT / "README.md").read_text()
    assert f"](docs/{doc})" in readme, (
        f"docs/{doc} is not linked from README.md's Documentation list: add a line there"
    )


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/"


def _curve_point(steps: int, seconds: float, al: float) -> dict:
    return {
        "steps": steps,
        "train_seconds": seconds,
        "cpu_seconds": 2 * seconds,
        "acceptance_length": al,
        "acceptance_rate_per_position": [al - 1, 0.1, 0.05],
        "categories": {"math": {"acceptance_length": al + 0.25}, "chat": {"acceptance_length": al}},
        "lossless": True,
        "segment": {"load_average": [3.0, 2.0, 1.0]},
    }


def test_the_learning_curves_section_and_figure_read_the_results() -> None:
    """bench_real_quality's section: every arm's figures, the goal at the last points and at
    equal training time, decision arms against the default, and one line per arm in the
    figure, through each point."""
    bd = _doc_module()
    arms = {
        "eagle3": {"group": "main", "status": "plateau", "commits": ["abc"], "points": []},
        "speculators": {"group": "main", "status": "cap", "peer_of": "eagle3"},
        "eagle3-ttt3": {"group": "decision", "status": "done", "commits": ["def"]},
    }
    arms["eagle3"]["points"] = [_curve_point(10, 100.0, 1.25), _curve_point(25, 250.0, 1.5)]
    arms["eagle3"]["points"].append(_curve_point(50, 500.0, 1.75))  # ahead of its peer
    arms["speculators"]["points"] = [_curve_point(10, 150.0, 1.125), _curve_point(25, 375, 1.375)]
    arms["eagle3-ttt3"]["points"] = [_curve_point(10, 50.0, 1.375)]
    d = {"bench": "real_quality", "settings": {"k": 3, "lr": 1e-4}, "arms": arms}
    text = "\n".join(bd.r_real_quality(d).lines)
    # compared at the last step both curves have, never with the peer's earlier point
    assert "at step 25: `eagle3` 1.5 against `speculators` 1.375: 1.09×, met" in text
    arms["speculators"]["status"] = "running"  # no verdict while a curve still runs
    text_running = "\n".join(bd.r_real_quality(d).lines)
    assert "1.09×, so far; neither curve is done (status plateau / running)" in text_running
    # equal training time: the shorter curve's 250 s; speculators' point within it is step 10
    assert "time (≤ 250 s): `eagle3` 1.5 (step 25), `speculators` 1.125 (step 10): 1.33×" in text
    assert "`eagle3-ttt3` at step 10: 1.375; eagle3 at the same step 1.25 (1.10×)" in text
    assert "| 10 | 100 | 200 | 3 | 1.25 | 0.25 / 0.1 / 0.05 | 1.25 | 1.5 | yes | – |" in text
    assert "peak learning rate 0.0001" in text
    svg = bd.curve_figure(d)
    assert svg.count("<polyline") == 2 * 3  # against steps and against time, each arm
    assert "speculators: 375, 1.375" in svg and "eagle3: 25, 1.500" in svg
