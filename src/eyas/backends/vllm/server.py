"""vLLM started by eyas: the server flags for each use, a local server's start and stop, and
the hook eval and capture start servers through (`VLLMServers`, the registry's `servers`).

    args = server_args("capture", target, "float32", capture_layers=[1, 2, 3, 4], storage_dir=d)
    with vllm_server(Path(".venv-vllm/bin/python"), model_dir, args, env=plugin_env()) as url:
        ...

Every use shares one builder (`server_args`): the dtype, `--max-model-len`, eager mode (a server
eyas starts lives for one stage; without it every start pays a torch.compile warm-up), the
text-only flag for a vision wrapper and the float32 MLA backend; `capture` adds hidden-state
extraction, `eval` the drafter's `--speculative-config`.

The server runs as a module (`python -m vllm.entrypoints.openai.api_server`: the `vllm`
script looks up a distribution named `vllm`, which the CPU wheel is not), in its own process
group so its engine and worker children stop with it. It is ready when one of `READY_PATHS`
answers 200, the check `VLLMBackend.ready` makes too. On a CPU build the KV-cache size and
thread binding come from the environment (`VLLM_CPU_KVCACHE_SPACE`, GiB).
"""

from __future__ import annotations

import contextlib
import json
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
from typing import TYPE_CHECKING, Any, Literal

from eyas.backends.vllm.capture import capture_args, plugin_env
from eyas.backends.vllm.conventions import (
    FLOAT32_MLA_DRAFTER,
    READY_PATHS,
    float32_mla_args,
    text_only_args,
)
from eyas.errors import EyasError, RefusedError

if TYPE_CHECKING:
    from eyas.hf_models import TargetModel

Use = Literal["serve", "capture", "eval"]


def server_args(
    use: Use,
    target: TargetModel,
    dtype: str = "auto",
    *,
    max_model_len: int | None = None,
    speculative_config: dict[str, Any] | None = None,
    capture_layers: list[int] | None = None,
    storage_dir: Path | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """The flags of a vLLM server for one use: `serve` (generation), `capture` (hidden states
    of `capture_layers` written under `storage_dir`) or `eval` (with the drafter when
    `speculative_config` is given, else the baseline)."""
    args = [
        "--dtype",
        dtype,
        "--max-model-len",
        str(max_model_len or target.context_length),
        "--enforce-eager",
        *text_only_args(target.wrapper),
        *float32_mla_args(target.text, dtype),
    ]
    if use == "capture":
        if not capture_layers or storage_dir is None:
            raise ValueError("a capture server needs capture_layers and storage_dir")
        args += capture_args(capture_layers, storage_dir)
    elif use == "eval" and speculative_config is not None:
        args += ["--speculative-config", json.dumps(speculative_config)]
    elif use not in ("serve", "eval"):
        raise ValueError(f"unknown server use {use!r}")
    return [*args, *extra]


# -- a local server ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    """Whether the server answers one of READY_PATHS (the backend's readiness check, made
    without an event loop: a server is started from synchronous code and inside one)."""
    for path in READY_PATHS:
        try:
            with urllib.request.urlopen(url + path, timeout=2) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
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
        while not _ready(url):
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


# -- the engine's hook: servers eyas starts for eval and capture ------------------------------


class VLLMServers:
    """How eval and capture start vLLM servers (`--vllm-python PY`) when given no `--url`."""

    flag = "--vllm-python"
    option = "vllm_python"  # the config field that lets eyas start a server

    def can_start(self, cfg: Any) -> bool:
        return getattr(cfg, self.option, None) is not None

    @contextlib.contextmanager
    def for_eval(self, cfg: Any, *, drafter: bool, scratch: Path, log_path: Path) -> Iterator[str]:
        """A server of the target, with the drafter (exported for vLLM when it is not in
        speculators format already) or without it (the baseline). On a CPU engine in float32,
        the precision offline evaluation uses."""
        import torch

        from eyas.hf_models import target_model

        target = target_model(cfg.target)
        float32 = not torch.cuda.is_available()
        spec = _speculative_config(cfg, scratch, float32) if drafter else None
        args = server_args(
            "eval",
            target,
            "float32" if float32 else "auto",
            max_model_len=min(target.context_length, 8192),
            speculative_config=spec,
        )
        with vllm_server(cfg.vllm_python, cfg.target, args, log_path=log_path) as url:
            yield url

    @contextlib.contextmanager
    def for_capture(
        self, cfg: Any, *, layers: list[int], target: TargetModel, log_path: Path
    ) -> Iterator[str]:
        """A capture server writing `layers` under `cfg.storage_dir` (default OUT/.incoming)."""
        storage = cfg.storage_dir or (cfg.out / ".incoming")
        storage.mkdir(parents=True, exist_ok=True)
        args = server_args(
            "capture",
            target,
            "float32" if cfg.dtype == "float32" else "auto",
            capture_layers=layers,
            storage_dir=storage,
        )
        with vllm_server(
            cfg.vllm_python,
            cfg.target,
            args,
            env=plugin_env(),
            log_path=log_path,
            ready_timeout_s=cfg.server.ready_timeout_s,
        ) as url:
            yield url


def _speculative_config(cfg: Any, scratch: Path, float32: bool) -> dict[str, Any]:
    """vLLM's `--speculative-config` for the drafter's vLLM export: its method names vLLM's
    method (`eagle3` for EAGLE-3 and EAGLE-3.1, `dflash`)."""
    from eyas.drafter.eagle3.export_mla import is_mla
    from eyas.drafter.load import resolve_drafter_dir
    from eyas.drafter.registry import method_reading
    from eyas.export.drafter import export_drafter
    from eyas.jsonl import read_json_object

    folder = resolve_drafter_dir(cfg.drafter)
    config = folder / "config.json"
    raw = json.loads(config.read_text()) if config.exists() else {}
    # already in a layout vLLM loads: speculators format, or an MLA drafter's vLLM layout
    # (ids at the top level)
    loadable = raw.get("speculators_model_type") or (
        is_mla(raw) and raw.get("eagle_aux_hidden_state_layer_ids")
    )
    if not loadable:
        folder = export_drafter(folder, "vllm", scratch / "vllm-drafter", cfg.target, cfg.k)
    method = method_reading(read_json_object(folder / "config.json"))
    refusal = method.vllm_refusal()
    if refusal:
        raise RefusedError("engine_unsupported", refusal)
    spec = method.vllm_speculative_config(folder, cfg.k)
    if float32 and is_mla(read_json_object(folder / "config.json")):
        spec.update(FLOAT32_MLA_DRAFTER)  # the drafter picks its own attention backend
    return spec


__all__ = ["VLLMProcess", "VLLMServers", "free_port", "server_args", "vllm_process", "vllm_server"]
