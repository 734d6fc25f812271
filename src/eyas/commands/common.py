"""What every command shares: the console, the one-line errors and deprecations, and the flag
groups several commands take."""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

import typer
from rich.console import Console

from eyas.backends.server_config import server_option_keys
from eyas.cli_schema import Flag, validation_message
from eyas.config import ModelConfig
from eyas.config_legacy import DeprecatedKey
from eyas.errors import EyasError
from eyas.store.job_result import RunStatus

console = Console(stderr=True)


def fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    head, *rest = [line.strip() for line in message.splitlines() if line.strip()] or [""]
    message = " ".join([head, "; ".join(rest)]) if rest else head  # one line, always
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _deprecations_as_lines() -> Iterator[None]:
    """Each old config key or flag read (`eyas.config_legacy`): one `deprecated:` line on
    stderr, once per command, instead of Python's two-line warning."""
    from rich.markup import escape

    seen: set[str] = set()
    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, DeprecatedKey):
            return shown(message, category, *args, **kwargs)
        if str(message) not in seen:
            seen.add(str(message))
            console.print(
                f"[yellow]deprecated:[/] {escape(str(message))}", highlight=False, soft_wrap=True
            )

    with warnings.catch_warnings():
        warnings.simplefilter("always", DeprecatedKey)
        warnings.showwarning = show
        yield


def user_errors(fn):
    """Turn the errors a user must fix into one `error:` line and an exit code."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        from pydantic import ValidationError

        try:
            with _deprecations_as_lines():
                return fn(*args, **kwargs)
        except EyasError as exc:
            fail(f"{exc.detail} [{exc.reason}]", exc.exit_code)
        except ValidationError as exc:
            fail(f"{validation_message(exc)} [bad_config]")

    return command


def model_renderer(model: ModelConfig):
    from eyas.render import Renderer

    return Renderer(model.dir, model.profile, model.thinking, model.trust_remote_code)


def server_flags(key: str, prefix: str = "") -> tuple[Flag, ...]:
    """A flag per `ServerConfig` setting under `key` (the same names in every command)."""
    return tuple(Flag(f"{key}.{k}", f"--{prefix}{name}") for k, name in server_option_keys())


# an engine's launch options (`eyas.backends.engine.LaunchOptions`): the servers eyas starts
# when a command has no --url; `--vllm-python` is the old name of `--engine-python`
ENGINE_FLAGS = (
    Flag("engine.python", "--engine-python"),
    Flag("engine.python", "--vllm-python", now="--engine-python"),
    Flag("engine.args", "--engine-arg"),
    Flag("engine.tensor_parallel_size", "--tensor-parallel-size"),
    Flag("engine.data_parallel_size", "--data-parallel-size"),
    Flag("engine.enforce_eager", "--enforce-eager"),
    Flag("engine.max_model_len", "--max-model-len"),
)

# `--include-truncated` (cut outputs trained too; off: skipped) became `--truncated train|skip`
INCLUDE_TRUNCATED = Flag(
    "truncated", "--include-truncated", now="--truncated train", switch=("train", "skip")
)

MODEL_FLAGS = (
    Flag("model.dir", "--model"),
    Flag("model.profile", "--profile"),
    Flag("model.thinking", "--thinking"),
    Flag("model.trust_remote_code", "--trust-remote-code"),
)


def run_line(run: RunStatus) -> None:
    """One line about the whole folder: the jobs that wrote it and whether they cover it."""
    from rich.markup import escape

    states = ", ".join(f"{j.state} {j.shard or '0/1'}" for j in run.jobs)
    verdict = "complete" if run.complete else "not complete yet"
    dup = f", {run.duplicates} duplicate rows dropped" if run.duplicates else ""
    # escaped: rich would read "[complete 0/1]" as a style tag and drop it
    console.print(escape(f"run: {run.num_jobs} job(s) [{states}]{dup}; the run is {verdict}"))
