"""One registry of engines: each engine's `Engine` entry, built in its own package (its
options model, default ceiling of requests in flight, and how to reach its backend class, its
acceptance hook and its server class). Adding an engine is one package plus one line here
(docs/architecture.md, "Adding an engine"); every stage finds what it needs through these
functions, never by an engine's name.

    async with open_pool("vllm", settings, cfg.server, operation="capture") as pool:
        states, attempts = await pool.call(lambda b: b.capture(sample_id, ids))
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from eyas.backends import local, openai_chat, sglang, vllm
from eyas.backends.engine import Engine, EngineOptions
from eyas.errors import EyasError, RefusedError

if TYPE_CHECKING:
    from eyas.backends.base import Backend, BackendSettings
    from eyas.backends.policy import ServerPool
    from eyas.backends.server import EngineServer
    from eyas.backends.server_config import ServerConfig

ENGINES: dict[str, Engine] = {
    "sglang": sglang.ENGINE,
    "vllm": vllm.ENGINE,
    "openai_chat": openai_chat.ENGINE,
    "local": local.ENGINE,
}


def engine_names() -> list[str]:
    return sorted(ENGINES)


def backend_class(name: str) -> type:
    return ENGINES[name].backend()


def engines_offering(operation: str) -> list[str]:
    return [n for n in engine_names() if operation in backend_class(n).operations]


def check_engine(name: str, operation: str | None = None) -> str:
    """`name` if it is a registered engine (offering `operation`, when given)."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {engine_names()}")
    if operation is not None and operation not in backend_class(name).operations:
        able = engines_offering(operation)
        raise ValueError(f"engine {name!r} cannot {operation}; these can: {able}")
    return name


def lossy(name: str) -> bool:
    """Whether the engine's outputs are re-tokenized text (an unknown name: not known lossy)."""
    return name in ENGINES and bool(backend_class(name).lossy)


# -- options ------------------------------------------------------------------------------------


def options_model(name: str) -> type[EngineOptions]:
    """The options model of engine `name` (the `engine` table's schema for it)."""
    check_engine(name)
    return ENGINES[name].options


def engine_options(name: str, value: Any = None) -> EngineOptions:
    """`value` (a dict or options, or None: the defaults) validated as engine `name`'s options;
    the `kind` is `name`."""
    model = options_model(name)
    if isinstance(value, model):
        return value
    data = value.model_dump(exclude_unset=True) if isinstance(value, EngineOptions) else value
    data = dict(data or {})
    if data.setdefault("kind", name) != name:
        raise ValueError(f"options of engine {data['kind']!r} given for engine {name!r}")
    return model.model_validate(data)


def option_models() -> list[type[EngineOptions]]:
    """Every registered engine's options model (the command line's `engine.*` flags)."""
    return [ENGINES[n].options for n in engine_names()]


# -- evaluation and servers eyas starts ---------------------------------------------------------


def eval_engine_names() -> list[str]:
    """The engines `eyas eval --backend` takes: served (an acceptance hook) or offline."""
    return [n for n in engine_names() if ENGINES[n].acceptance or ENGINES[n].offline_eval]


def check_eval_engine(name: str) -> str:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {eval_engine_names()}")
    if name not in eval_engine_names():
        raise ValueError(f"engine {name!r} cannot evaluate; these can: {eval_engine_names()}")
    return name


def offline_eval(name: str) -> bool:
    """Whether `eyas eval --backend name` is eyas's offline evaluation (in process)."""
    return ENGINES[name].offline_eval


def acceptance(name: str) -> Any:
    """The engine's acceptance hook (an instance), or a refusal when it has none."""
    hook = ENGINES[name].acceptance
    if hook is None:
        raise EyasError("bad_flag", f"engine {name} reports no speculative-decoding counts")
    return hook()


def server_class(name: str) -> type[EngineServer] | None:
    """The engine's server class (servers eyas starts), None when eyas cannot start one."""
    server = ENGINES[name].server
    return server() if server is not None else None


def can_start(name: str, options: EngineOptions) -> bool:
    """Whether eyas can start `name`'s servers with these options."""
    cls = server_class(name)
    return cls is not None and cls.can_start(options)


def start_flag(name: str) -> str | None:
    """The option that lets eyas start the engine's servers (`--engine-python`), if any."""
    cls = server_class(name)
    return cls.START_FLAG if cls is not None else None


# -- a pool of an engine's servers --------------------------------------------------------------


def build_backends(
    name: str,
    settings: BackendSettings,
    options: EngineOptions,
    urls: list[str],
    session: Any = None,
) -> list[Backend]:
    """One backend per URL for a served engine, one in-process backend otherwise."""
    cls = backend_class(name)
    if cls.remote:
        if not urls:
            raise EyasError("bad_flag", f"engine {name} needs at least one --url")
        return [cls.from_settings(settings, options, url=u, session=session) for u in urls]
    return [cls.from_settings(settings, options, url=None, session=None)]


@contextlib.asynccontextmanager
async def open_pool(
    name: str,
    settings: BackendSettings,
    server: ServerConfig,
    *,
    operation: str,
    options: EngineOptions | None = None,
    concurrency: int | None = None,
) -> AsyncIterator[ServerPool]:
    """A pool of `name`'s servers as `server` (an `eyas.backends.server_config.ServerConfig`)
    describes them, ready as soon as one serves (the others join when they answer; its
    `url_file` adds servers while it runs), its HTTP session and backends closed on exit.
    `options`: the engine's own (default: its defaults). `concurrency` is the in-flight ceiling
    when `server` sets none (default: the engine's). No server ready within
    `server.ready_timeout_s` is a refusal (exit 1)."""
    from eyas.backends.policy import ServerPool
    from eyas.backends.reasons import BackendError

    try:
        check_engine(name, operation)
        options = engine_options(name, options)
    except ValueError as exc:
        raise EyasError("bad_flag", str(exc)) from exc
    cls = backend_class(name)
    if server.url_file is not None and not cls.remote:
        raise EyasError("bad_flag", f"engine {name} runs in process: it takes no --url-file")
    limit = server.concurrency or concurrency or ENGINES[name].default_concurrency
    settings = dataclasses.replace(
        settings, api_key=server.api_key() or settings.api_key, max_in_flight=limit
    )
    session = None
    if cls.remote:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300))
    try:
        remote_only_file = cls.remote and not server.urls and server.url_file is not None
        backends = (
            []
            if remote_only_file
            else build_backends(name, settings, options, server.urls, session)
        )
        pool = ServerPool.from_config(
            server,
            backends,
            concurrency=limit,
            adaptive=cls.remote,  # an in-process engine's batch is its limit
            new_backend=lambda url: cls.from_settings(settings, options, url=url, session=session),
        )
        try:
            try:
                await pool.ready()
            except BackendError as exc:
                raise RefusedError(exc.reason, exc.detail) from exc
            yield pool
        finally:
            await pool.close()
    finally:
        if session is not None:
            await session.close()


__all__ = [
    "ENGINES",
    "Engine",
    "acceptance",
    "backend_class",
    "can_start",
    "check_engine",
    "check_eval_engine",
    "engine_names",
    "engine_options",
    "eval_engine_names",
    "lossy",
    "offline_eval",
    "open_pool",
    "option_models",
    "options_model",
    "server_class",
    "start_flag",
]
