"""Start a helper server (the fake SGLang or the fake vLLM) in a subprocess and wait until it
listens. `fake_server` yields a handle whose process a test may freeze (SIGSTOP: a server that
holds its connections and answers nothing), thaw or kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class FakeServer:
    url: str
    proc: subprocess.Popen

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


@contextmanager
def fake_server(module: str, *args: str) -> Iterator[FakeServer]:
    """A fake server `python -m module args...`, stopped on exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield FakeServer(f"http://127.0.0.1:{int(line.split()[1])}", proc)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
            proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def fake_sglang_server(*args: str) -> Iterator[str]:
    """Yield the base URL of a fake SGLang server started with CLI `args`."""
    with fake_server("eyas.testing.fake_sglang", *args) as server:
        yield server.url


@contextmanager
def fake_vllm_server(*args: str) -> Iterator[str]:
    """Yield the base URL of a fake vLLM server started with CLI `args`."""
    with fake_server("eyas.testing.fake_vllm", *args) as server:
        yield server.url
