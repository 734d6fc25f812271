"""What an engine is to eyas: an `Engine` entry, built in the engine's own package
(`eyas.backends.<engine>/__init__.py`, light: no client, no torch) and listed in
`eyas.backends.registry.ENGINES` (docs/architecture.md, "Adding an engine").

    ENGINE = Engine(
        name="vllm",
        options=VLLMOptions,  # its options model: the `engine` table of a command's config
        default_concurrency=256,
        backend=_backend,  # () -> the backend class, imported when called
        acceptance=_acceptance,  # () -> its acceptance hook (served `eyas eval`)
        server=_server,  # () -> its server class (servers eyas starts)
    )

An engine's options subclass `EngineOptions` with `kind: Literal["<name>"]`: the registry picks
the model by `kind` (a tagged union of the registered engines' options). An engine whose servers
eyas starts takes `LaunchOptions`: its python, the extra launch arguments passed through
verbatim, tensor and data parallelism, eager mode, the longest sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from eyas.options import Strict


class EngineOptions(Strict):
    """An engine's own settings. `kind` names the engine (each subclass fixes it)."""

    kind: str


# flags an engine's own launch option sets, by option: given in `args` too, they would be given
# twice (the server's argument parser keeps the last, silently)
_ARG_NAMES = {
    "tensor_parallel_size": ("--tensor-parallel-size", "-tp"),
    "data_parallel_size": ("--data-parallel-size", "-dp"),
    "max_model_len": ("--max-model-len",),
}


class LaunchOptions(EngineOptions):
    """The settings of an engine whose servers eyas starts (when a command has no --url)."""

    python: Path | None = Field(
        None,
        description="python of the engine's install: eyas starts and stops its servers when "
        "no --url is given",
    )
    args: list[str] = Field(
        default_factory=list,
        description="extra launch arguments, passed to the server verbatim (repeat "
        "--engine-arg; write a value with its flag, --engine-arg=--max-num-seqs=512)",
    )
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per server (tensor parallel)")
    data_parallel_size: int = Field(1, ge=1, description="data-parallel replicas per server")
    enforce_eager: bool | None = Field(
        None,
        description="run the model eagerly (no compiled graphs); default: on CPU only",
    )
    max_model_len: int | None = Field(
        None, ge=16, description="the server's longest sequence (default: the target's context)"
    )

    @model_validator(mode="after")
    def _each_setting_once(self) -> LaunchOptions:
        given = {a.split("=", 1)[0] for a in self.args if a.startswith("-")}
        for option, names in _ARG_NAMES.items():
            default = type(self).model_fields[option].default
            twice = given.intersection(names)
            if twice and getattr(self, option) != default:
                raise ValueError(
                    f"{sorted(twice)[0]} is set twice: as {option} and in the engine args; give one"
                )
        return self

    def arg_given(self, *names: str) -> bool:
        """Whether the extra arguments set one of the flags `names` themselves."""
        return any(a.split("=", 1)[0] in names for a in self.args)


@dataclass(frozen=True, kw_only=True)
class Engine:
    """One engine eyas talks to. The callables import the engine's parts when called, so the
    registry imports every engine package without loading a client (or torch)."""

    name: str
    options: type[EngineOptions]
    default_concurrency: int  # the in-flight ceiling per server when the user sets none
    backend: Callable[[], type]  # the backend class (`eyas.backends.base.Backend`)
    # served `eyas eval`: how the engine counts speculative decoding (an
    # `eyas.evaluate.served.Acceptance`); None: its servers cannot be evaluated
    acceptance: Callable[[], Any] | None = None
    # the engine's server class (`eyas.backends.server.EngineServer`): eyas starts servers
    # when no --url is given; None: the user runs them
    server: Callable[[], type] | None = None
    # `eyas eval --backend NAME` decodes in process (eyas's offline evaluation), not served
    offline_eval: bool = False


__all__ = ["Engine", "EngineOptions", "LaunchOptions"]
