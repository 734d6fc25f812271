"""Command-line flags generated from the config schema, so a default lives in one place.

    @app.command()
    @schema_flags(TrainConfig, "target", "data", Flag("ttt", help="..."))
    def train(config: Path | None = None, set_: list[str] | None = None, *, flags: dict): ...

Each flag gets its type (a Literal becomes a choice, a bool an on/off switch, a list a
repeatable option), its help and its shown default from the field; the command receives only
the flags the user gave, as `{dotted key: value}`, for `eyas.config.build_config`.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rich.markup import escape


@dataclass(frozen=True)
class Flag:
    key: str  # dotted config key
    name: str | None = None  # option name; default: the key's last part, dashed
    help: str | None = None

    @property
    def option(self) -> str:
        return self.name or "--" + self.key.split(".")[-1].replace("_", "-")


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def field_of(model: type[BaseModel], key: str) -> FieldInfo:
    """The pydantic field a dotted key names (through nested models)."""
    parts = key.split(".")
    for part in parts[:-1]:
        model = _unwrap_optional(model.model_fields[part].annotation)
    return model.model_fields[parts[-1]]


def _option(field: FieldInfo, flag: Flag) -> tuple[Any, dict[str, Any]]:
    annotation = _unwrap_optional(field.annotation)
    default = field.get_default(call_default_factory=True)
    shown = "" if default is None or default == [] else f"; default {default}"
    # escaped: typer renders help as rich markup, where [..] would be a style tag
    help_text = escape(f"{flag.help or field.description or ''} [{flag.key}{shown}]".strip())
    kwargs: dict[str, Any] = {"help": help_text, "show_default": False}
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return annotation | None, kwargs
    if annotation is bool:
        return bool | None, kwargs
    if origin is list:
        (item,) = typing.get_args(annotation)
        return list[item] | None, kwargs
    if annotation in (int, float, str, Path):
        return annotation | None, kwargs
    return str | None, kwargs


def schema_flags(model: type[BaseModel], *flags: Flag | str) -> Callable:
    """Decorator: add one option per flag; the command gets `flags={key: value}`."""
    specs = [f if isinstance(f, Flag) else Flag(f) for f in flags]

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in sig.parameters.values()
            if p.name != "flags"
        ]
        added = []
        for k, spec in enumerate(specs):
            annotation, kwargs = _option(field_of(model, spec.key), spec)
            is_bool = annotation == (bool | None)
            names = [f"{spec.option}/--no-{spec.option[2:]}"] if is_bool else [spec.option]
            added.append(
                inspect.Parameter(
                    f"flag_{k}",
                    inspect.Parameter.KEYWORD_ONLY,
                    default=None,
                    annotation=Annotated[annotation, typer.Option(*names, **kwargs)],
                )
            )

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            given = {}
            for k, spec in enumerate(specs):
                value = kwargs.pop(f"flag_{k}", None)
                if value is not None and value != [] and value != ():
                    given[spec.key] = list(value) if isinstance(value, tuple) else value
            return fn(*args, flags=given, **kwargs)

        params = own + added
        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate
