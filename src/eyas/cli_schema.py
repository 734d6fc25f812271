"""Command-line parameters generated from the config schema, so a default lives in one place
and every flag is also a config key.

    @app.command()
    @schema_flags(ConvertConfig, Arg("input"), Arg("output"), "format", Flag("dataset", help="..."))
    def convert(cfg: ConvertConfig) -> None: ...

Every command gets `--config FILE` and `--set KEY=VALUE`; each `Arg` becomes a positional
argument and each flag an option, with its type (a Literal or a registry's `Choices` becomes a
choice, a bool an on/off switch, a list a repeatable option), its help and its shown default
(or "required") from the field. The command receives the validated config: the file, then the
flags and arguments the user gave, then the overrides. Before the command runs, the paths the
config reads (`input_keys`) are checked to exist, so a missing path is reported before any
file is parsed. Adding a flag is one line: the field in the command's config model, its name here.
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
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.markup import escape

from eyas.config import Choices, ConfigError, build_config, values_at
from eyas.config_legacy import UNTIL, deprecated
from eyas.errors import EyasError


@dataclass(frozen=True)
class Flag:
    key: str  # dotted config key
    name: str | None = None  # option name; default: the key's last part, dashed
    help: str | None = None
    # an old flag kept as an alias: what it is now (each use prints one `deprecated:` line)
    now: str | None = None
    # an old on/off switch for a key that now takes a value: (value when on, value when off)
    switch: tuple[Any, Any] | None = None

    @property
    def option(self) -> str:
        return self.name or "--" + self.key.split(".")[-1].replace("_", "-")


@dataclass(frozen=True)
class Arg:
    """A positional argument; like a flag, it is a config key too (so it may come from
    `--config` instead)."""

    key: str
    help: str | None = None

    @property
    def option(self) -> str:
        return self.key.split(".")[-1].upper()


@dataclass(frozen=True)
class CommandSchema:
    """What a generated command reads: its config model and its parameters."""

    model: type[BaseModel]
    params: tuple[Flag | Arg, ...]
    reads: tuple[str, ...] = ()  # input keys of this command beyond the model's `input_keys`

    @property
    def input_keys(self) -> tuple[str, ...]:
        return (*getattr(self.model, "input_keys", ()), *self.reads)

    def where(self, key: str) -> str:
        """How a user names `key`: its flag or argument and its config key."""
        for p in self.params:
            if p.key == key:
                plain = isinstance(p, Arg) or p.option == "--" + key.replace("_", "-")
                return p.option if plain else f"{p.option} ({key})"
        return key

    def load(
        self, file: Path | None, given: dict[str, Any], overrides: list[str] | None
    ) -> BaseModel:
        try:
            cfg = build_config(self.model, file, given, overrides)
        except ValidationError as exc:
            raise ConfigError(validation_message(exc, self)) from exc
        for key in self.input_keys:
            for value in values_at(cfg, key):
                if not Path(value).exists():
                    raise EyasError("no_input", f"{value} does not exist ({self.where(key)})")
        return cfg


def _unwrap_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def field_of(model: type[BaseModel], key: str) -> FieldInfo:
    """The pydantic field a dotted key names (through nested models; `*`: a list's items; an
    engine's options: the first registered engine's model that has it)."""
    parts = [p for p in key.split(".") if p != "*"]
    for part in parts[:-1]:
        model = _unwrap_optional(_owner(model, part).model_fields[part].annotation)
        if typing.get_origin(model) is list:
            (model,) = typing.get_args(model)
    return _owner(model, parts[-1]).model_fields[parts[-1]]


def _owner(model: type[BaseModel], name: str) -> type[BaseModel]:
    """`model`, or for the engine-options base, the registered engine's model with `name`."""
    from eyas.backends.engine import EngineOptions

    if name in model.model_fields or not issubclass(model, EngineOptions):
        return model
    from eyas.backends.registry import option_models

    return next((m for m in option_models() if name in m.model_fields), model)


def default_of(model: type[BaseModel], key: str) -> Any:
    """The default a dotted key takes: through the enclosing model's default when it has one
    (a command's own defaults for a shared model, e.g. capture's `server.concurrency` 8),
    else the field's own. PydanticUndefined when it is required."""
    parts = key.split(".")
    top = model.model_fields[parts[0]] if "*" not in parts else None
    own = top is not None and top.default_factory not in (None, _unwrap_optional(top.annotation))
    if top is not None and len(parts) > 1 and own:
        value: Any = top.get_default(call_default_factory=True)
        for part in parts[1:]:
            if not isinstance(value, BaseModel):
                break
            value = getattr(value, part)
        else:
            return value
    field = field_of(model, key)
    if is_required(field):
        return PydanticUndefined
    return field.get_default(call_default_factory=True)


def choices_of(field: FieldInfo) -> tuple[str, ...] | None:
    """The values a choice field takes (a Literal, or the names of its registry)."""
    for meta in field.metadata:
        if isinstance(meta, Choices):
            return tuple(meta.names())
    annotation = _unwrap_optional(field.annotation)
    if typing.get_origin(annotation) is Literal:
        return tuple(typing.get_args(annotation))
    return None


def is_required(field: FieldInfo) -> bool:
    return field.default is PydanticUndefined and field.default_factory is None


def _help(field: FieldInfo, spec: Flag | Arg, default: Any) -> str:
    if default is PydanticUndefined:
        shown = "; required"
    else:
        shown = "" if default is None or default == [] else f"; default {default}"
    described = spec.help or field.description or ""
    if isinstance(spec, Flag) and spec.now:
        off = f", --no-{spec.option[2:]} {spec.switch[1]}" if spec.switch else ""
        described = f"the old name of {spec.now}{off} (read until {UNTIL})"
    if _registry_choices(field):
        described += f" (one of: {', '.join(choices_of(field) or ())})"
    text = f"{described} [{spec.key}{shown}]".strip()
    return escape(text)  # typer renders help as rich markup, where [..] would be a style tag


def _registry_choices(field: FieldInfo) -> bool:
    return any(isinstance(meta, Choices) for meta in field.metadata)


def _annotation(field: FieldInfo) -> Any:
    """The command-line type of a field's value (before pydantic validates it). A registry's
    choices are checked by the schema when the command runs, against the registry as it is
    then (an engine or format registered after this module was imported still counts)."""
    annotation = _unwrap_optional(field.annotation)
    if _registry_choices(field):
        return str
    choices = choices_of(field)
    if choices is not None:
        return Literal[choices]  # type: ignore[valid-type]
    if annotation is bool:
        return bool
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return list[item] if item in (int, float, str, Path) else list[str]
    if annotation in (int, float, str, Path):
        return annotation
    return str  # unions such as `count or 'all'`: the schema parses the text


def _parameter(model: type[BaseModel], name: str, spec: Flag | Arg) -> inspect.Parameter:
    field = field_of(model, spec.key)
    default = default_of(model, spec.key)
    annotation = bool if isinstance(spec, Flag) and spec.switch else _annotation(field)
    info: Any
    if isinstance(spec, Arg):
        info = typer.Argument(
            help=_help(field, spec, default), metavar=spec.option, show_default=False
        )
    else:
        names = [spec.option]
        if annotation is bool:
            names = [f"{spec.option}/--no-{spec.option[2:]}"]
        kwargs: dict[str, Any] = {"help": _help(field, spec, default), "show_default": False}
        if typing.get_origin(annotation) is list:
            kwargs["metavar"] = f"<{spec.option[2:]}>"
        info = typer.Option(*names, **kwargs)
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[annotation | None, info],
    )


_CONFIG = inspect.Parameter(
    "config_file",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        Path | None,
        typer.Option(
            "--config", metavar="<file>", help="TOML config: every flag is a key (flags override)"
        ),
    ],
)
_SET = inspect.Parameter(
    "overrides",
    inspect.Parameter.KEYWORD_ONLY,
    default=None,
    annotation=Annotated[
        list[str] | None,
        typer.Option(
            "--set", metavar="<key=value>", help="dotted config override, e.g. a.b=1 (repeatable)"
        ),
    ],
)


def schema_flags(
    model: type[BaseModel], *params: Flag | Arg | str, reads: tuple[str, ...] = ()
) -> Callable:
    """Decorator: `--config`, `--set`, one argument per `Arg` and one option per flag (a
    string is `Flag(key)`); the command is called with `cfg=` the validated config. `reads`
    names the paths this command reads beyond the model's `input_keys`."""
    specs = tuple(p if isinstance(p, (Flag, Arg)) else Flag(p) for p in params)
    schema = CommandSchema(model, specs, reads)

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [
            p.replace(
                kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation)
            )
            for p in sig.parameters.values()
            if p.name != "cfg"
        ]
        names = [
            s.key.replace(".", "_") if isinstance(s, Arg) else f"flag_{k}"
            for k, s in enumerate(specs)
        ]
        added = [_parameter(model, n, s) for n, s in zip(names, specs)]
        args = [p for p, s in zip(added, specs) if isinstance(s, Arg)]
        flags = [p for p, s in zip(added, specs) if not isinstance(s, Arg)]

        @functools.wraps(fn)
        def command(*a: Any, **kwargs: Any) -> Any:
            file, overrides = kwargs.pop("config_file", None), kwargs.pop("overrides", None)
            given: dict[str, Any] = {}
            by: dict[str, str] = {}
            for name, spec in zip(names, specs):
                value = kwargs.pop(name, None)
                if value is not None and value != [] and value != ():
                    value = list(value) if isinstance(value, tuple) else value
                    if isinstance(spec, Flag) and spec.switch:
                        value = spec.switch[0] if value else spec.switch[1]
                    if isinstance(spec, Flag) and spec.now:
                        deprecated(spec.option, spec.now, "flag")
                    if spec.key in given and given[spec.key] != value:  # a flag and its alias
                        raise ConfigError(
                            f"{by[spec.key]} and {spec.option} set {spec.key}: give one"
                        )
                    given[spec.key], by[spec.key] = value, spec.option
            return fn(*a, cfg=schema.load(file, given, overrides), **kwargs)

        parameters = [*args, *own, _CONFIG, _SET, *flags]
        command.__signature__ = sig.replace(parameters=parameters)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in parameters}
        command.schema = schema  # type: ignore[attr-defined]
        return command

    return decorate


def validation_message(exc: ValidationError, schema: CommandSchema | None = None) -> str:
    """One line for all of a config's errors, each named by its key (and flag)."""
    messages: dict[str, list[str]] = {}
    for err in exc.errors():
        # pydantic adds the branch of a union or a validator's name to `loc`; keep the keys
        parts = []
        for part in err.get("loc", ()):
            if not (isinstance(part, int) or str(part).isidentifier()):
                break
            parts.append(str(part))
        key = ".".join(parts)
        if err["type"] == "missing":
            msg = "required"
        elif err["type"] == "extra_forbidden" and parts[:1] == ["engine"]:
            msg = "not an option of this engine (--backend)"
        elif err["type"] == "extra_forbidden":
            msg = "unknown key"
        else:
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
        where = schema.where(key) if schema and key else key
        messages.setdefault(where, [])
        if msg not in messages[where]:
            messages[where].append(msg)
    return "invalid config: " + "; ".join(
        f"{where}: {' or '.join(msgs)}" if where else " or ".join(msgs)
        for where, msgs in messages.items()
    )
