"""Start a helper server (the fake SGLang) in a subprocess and wait until it listens."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fake_sglang_server(*args: str) -> Iterator[str]:
    """Yield the base URL of a fake SGLang server started with CLI `args`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "eyas.testing.fake_sglang", *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
