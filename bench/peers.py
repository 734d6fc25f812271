"""Peer tools for the benchmarks, each in its own venv (their pins clash with eyas's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def speculators_venv() -> Path:
    """speculators 0.9.0's venv, built on first use by tools/speculators_env.sh (~2 min)."""
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "speculators_env.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())
