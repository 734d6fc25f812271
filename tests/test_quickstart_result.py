"""`eyas quickstart` exits on the typed result's failures and prints each."""

from pathlib import Path

from typer.testing import CliRunner

from eyas.cli import app
from eyas.quickstart import QuickstartResult


def _result(failures: list[str]) -> QuickstartResult:
    return QuickstartResult(
        failures=failures,
        native_verdict="PASS",
        native_quarantined=0,
        naive_verdict="FAIL",
        naive_systemic_checks=["tool-format"],
        report=Path("report.html"),
        acceptance_length=2.5,
        lossless=True,
        ab={"b1_native": 2.5, "b1_naive": 1.5},
        model_dir=Path("toy"),
        summary={},
    )


def test_the_quickstart_exit_follows_the_typed_failures(tmp_path, monkeypatch):
    import eyas.quickstart as quickstart

    for failures, code in (([], 0), (["speculative decoding was not lossless"], 1)):
        monkeypatch.setattr(quickstart, "run_quickstart", lambda *a, f=failures, **k: _result(f))
        res = CliRunner().invoke(app, ["quickstart", "--out", str(tmp_path)])
        assert res.exit_code == code, res.output
        assert ("quickstart check failed: speculative decoding was not lossless" in res.output) == (
            code == 1
        )
