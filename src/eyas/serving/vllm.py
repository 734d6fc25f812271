"""Start and stop a local vLLM OpenAI-compatible server.

    with vllm_server(Path(".venv-vllm/bin/python"), model_dir, args=["--dtype", "float32"]) as url:
        ...

The server runs as a module (`python -m vllm.entrypoints.openai.api_server`: the `vllm`
script looks up a distribution named `vllm`, which the CPU wheel is not), in its own process
group so its engine and worker children stop with it. On a CPU build the KV-cache size and
thread binding come from the environment (`VLLM_CPU_KVCACHE_SPACE`, GiB).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from eyas.errors import EyasError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@dataclass
class VLLMProcess:
    url: str
    proc: subprocess.Popen

    def kill(self) -> None:
        """SIGKILL the server and its engine children at once (a crash, for tests)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@contextlib.contextmanager
def vllm_server(
    python: str | Path,
    model: str | Path,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    log_path: str | Path | None = None,
    ready_timeout_s: float = 300.0,
    served_name: str = "target",
) -> Iterator[str]:
    """Yield the URL of a ready server; stop it (and its children) on exit."""
    with vllm_process(python, model, args, env, log_path, ready_timeout_s, served_name) as server:
        yield server.url


@contextlib.contextmanager
def vllm_process(
    python: str | Path,
    model: str | Path,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    log_path: str | Path | None = None,
    ready_timeout_s: float = 300.0,
    served_name: str = "target",
) -> Iterator[VLLMProcess]:
    """`vllm_server`, yielding the process too."""
    python = Path(python)
    if not python.exists():
        raise EyasError("no_vllm", f"--vllm-python {python} does not exist")
    port = free_port()
    full_env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        "HF_HUB_OFFLINE": "1",
        **(env or {}),
    }
    cmd = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(args or []),
    ]
    log_path = Path(log_path) if log_path else Path(os.devnull)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + ready_timeout_s
        while not _healthy(url):
            if proc.poll() is not None:
                raise EyasError(
                    "server_failed",
                    f"the vLLM server exited with {proc.returncode} before it was ready "
                    f"(log: {log_path})",
                )
            if time.time() > deadline:
                raise EyasError(
                    "server_not_ready", f"vLLM not ready after {ready_timeout_s:.0f}s ({log_path})"
                )
            time.sleep(1.0)
        yield VLLMProcess(url, proc)
    finally:
        _stop(proc)
