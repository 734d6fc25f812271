"""A server process eyas starts for an engine (when a command has no --url): its command line,
its readiness, its health and its shutdown. It knows nothing of eyas's stages: the stage that
starts one decides what is served and hands it plain arguments (extra `args`, `env`).

    launch = VLLMServer.capture_launch(layers, storage_dir)  # what capture serves
    with VLLMServer(options, target, dtype="float32", args=launch.args, env=launch.env,
                    log_path=log) as server:
        ... server.url ...

An engine subclasses `EngineServer` with its `command` and the lines of its log that mean it
cannot serve (`FATAL`: out of memory, a CUDA error, too few GPUs), as datatrove's
`vllm_server.py` reads its server's output. The server runs in its own process group, so its
engine and worker children stop with it; its output goes to `log_path`. It is ready when one of
`READY_PATHS` answers 200; a server that exits, or whose log shows a fatal line, before that
is refused at once with the line's reason, not after the ready timeout. An error that ends a
command while the server runs names the server's fatal line too (`__exit__`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from eyas.backends.engine import LaunchOptions
from eyas.errors import EyasError, RefusedError

if TYPE_CHECKING:
    from eyas.hf_models import TargetModel


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_present() -> bool:
    """Whether this machine shows eyas a CUDA GPU (a server eyas starts runs here). Read from
    the device files the NVIDIA driver creates, so the answer does not depend on the torch eyas
    runs with (a CPU build beside an engine's CUDA install is common); `CUDA_VISIBLE_DEVICES`
    set empty (or -1) hides them, as it does from the engine."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return Path("/dev/nvidiactl").exists() and any(Path("/dev").glob("nvidia[0-9]*"))


@dataclass(frozen=True)
class Launch:
    """What a stage adds to a server's start: extra arguments and environment."""

    args: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Fatal:
    """A log line that means the server cannot serve: its reason code and the line."""

    reason: str
    line: str


class EngineServer:
    """One engine server process, serving `target` (a model directory read once). Subclasses
    set `ENGINE` (its name in messages), `command`, `READY_PATHS` and `FATAL` ((pattern,
    reason) pairs, first match wins), and where the engine can, how it writes hidden states
    (`capture_launch`) and how it serves a drafter (`drafter_launch`)."""

    ENGINE: ClassVar[str] = "engine"
    READY_PATHS: ClassVar[tuple[str, ...]] = ("/health",)
    FATAL: ClassVar[tuple[tuple[str, str], ...]] = ()
    # the option a user sets so that eyas can start the engine's servers
    START_FLAG: ClassVar[str] = "--engine-python"

    def __init__(
        self,
        options: LaunchOptions,
        target: TargetModel,
        *,
        dtype: str = "auto",
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_path: str | Path | None = None,
        ready_timeout_s: float = 300.0,
        served_name: str = "target",
    ):
        self.options = options
        self.target = target
        self.dtype = dtype
        self.args = list(args)
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path else None
        self.ready_timeout_s = ready_timeout_s
        self.served_name = served_name
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None

    # -- what a subclass says ---------------------------------------------------------------------

    @classmethod
    def can_start(cls, options: LaunchOptions) -> bool:
        """Whether eyas can start this engine's servers with `options` (its python is given)."""
        return getattr(options, "python", None) is not None

    def command(self, port: int) -> list[str]:
        """The command line of a server listening on 127.0.0.1:`port`."""
        raise NotImplementedError

    @classmethod
    def capture_launch(cls, layers: list[int], storage_dir: Path) -> Launch:
        """What makes a server write the hidden states of `layers` (HF `hidden_states`
        indices) of every request under `storage_dir`."""
        raise EyasError("bad_flag", f"eyas cannot capture hidden states through {cls.ENGINE}")

    @classmethod
    def drafter_launch(cls, speculative_config: dict[str, Any], dtype: str) -> list[str]:
        """The arguments that serve a drafter, from its speculative config (`model`: the
        drafter folder in this engine's layout, `num_speculative_tokens`, the method's own
        keys) at `dtype`."""
        raise EyasError("bad_flag", f"eyas cannot serve a drafter on {cls.ENGINE}")

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, then the stage's `env`."""
        return {**os.environ, **self.env}

    @classmethod
    def fatal(cls, line: str) -> Fatal | None:
        """The reason a log line ends the server, if it is one of `FATAL`."""
        for pattern, reason in cls.FATAL:
            if re.search(pattern, line):
                return Fatal(reason, line.strip())
        return None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> str:
        """Start the server and wait until it serves; its URL."""
        python = getattr(self.options, "python", None)
        if python is None or not Path(python).exists():
            raise EyasError(
                "no_engine_python",
                f"{self.START_FLAG} {python} does not exist: the python of a {self.ENGINE} install",
            )
        port = free_port()
        log = self.log_path or Path(os.devnull)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                self.command(port),
                env=self.environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.url = f"http://127.0.0.1:{port}"
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.url is not None
        deadline = time.monotonic() + self.ready_timeout_s
        where = f"(log: {self.log_path})" if self.log_path else "(no log kept)"
        while not self._answers(self.url):
            if (fatal := self._fatal_in_log()) is not None:
                raise EyasError(
                    fatal.reason, f"the {self.ENGINE} server cannot serve: {fatal.line} {where}"
                )
            if self.proc.poll() is not None:
                raise EyasError(
                    "server_failed",
                    f"the {self.ENGINE} server exited with {self.proc.returncode} before it was "
                    f"ready {where}",
                )
            if time.monotonic() > deadline:
                raise EyasError(
                    "server_not_ready",
                    f"{self.ENGINE} not ready after {self.ready_timeout_s:.0f}s {where}",
                )
            time.sleep(1.0)

    def _answers(self, url: str) -> bool:
        """Whether the server answers one of READY_PATHS (made without an event loop: a server
        is started from synchronous code and inside one)."""
        for path in self.READY_PATHS:
            try:
                with urllib.request.urlopen(url + path, timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
        return False

    def _fatal_in_log(self) -> Fatal | None:
        if self.log_path is None or not self.log_path.exists():
            return None
        with self.log_path.open(errors="replace") as log:
            for line in log:
                if (fatal := self.fatal(line)) is not None:
                    return fatal
        return None

    def health(self) -> Fatal | None:
        """None while the server runs and its log shows no fatal line; else why it cannot serve
        (`server_exited` when it is gone without one)."""
        if (fatal := self._fatal_in_log()) is not None:
            return fatal
        if self.proc is not None and self.proc.poll() is not None:
            return Fatal("server_exited", f"exit status {self.proc.returncode}")
        return None

    def stop(self) -> None:
        """SIGTERM the server's process group; SIGKILL what is left after 30 s."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL the server and its children at once (a crash, for tests)."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def __enter__(self) -> EngineServer:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        fatal = self.health() if isinstance(exc, EyasError) else None
        self.stop()
        if fatal is not None and fatal.reason != "server_exited":
            # the command failed while its server could not serve: say why, with the server's
            # own words, instead of only what the client saw
            where = f" (log: {self.log_path})" if self.log_path else ""
            kind = RefusedError if isinstance(exc, RefusedError) else EyasError
            raise kind(
                fatal.reason, f"{exc.detail}; the {self.ENGINE} server: {fatal.line}{where}"
            ) from exc


__all__ = ["EngineServer", "Fatal", "Launch", "free_port", "gpu_present"]
