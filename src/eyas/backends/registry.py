"""One registry of engines: a name, the backend class that speaks to it, its default ceiling of
requests in flight, and the hooks served evaluation and server start-up use. Adding an engine is
one module (its backend class, with `from_settings`, `operations` and the operations it offers;
for served evaluation an acceptance hook; for servers eyas starts, a servers hook) plus one line
here (docs/architecture.md, "Adding an engine").

    async with open_pool("vllm", settings, cfg.server, operation="capture") as pool:
        states, attempts = await pool.call(lambda b: b.capture(sample_id, ids))
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eyas.backends.base import Backend, BackendSettings
from eyas.backends.policy import ServerPool
from eyas.backends.reasons import BackendError
from eyas.errors import EyasError, RefusedError

if TYPE_CHECKING:
    from eyas.config import ServerConfig

SERVED_EVALUATOR = "eyas.evaluate.served:evaluate_served"


@dataclass(frozen=True)
class Engine:
    backend: str  # "module:Class"
    default_concurrency: int  # the in-flight ceiling when the user sets none
    # served `eyas eval`: "module:Class" counting the engine's speculative decoding (an
    # `eyas.evaluate.served.Acceptance`); None: its servers cannot be evaluated
    acceptance: str | None = None
    # "module:Class" starting local servers for eval and capture when no --url is given
    # (`for_eval`, `for_capture`, `can_start`, `flag`); None: the user runs the servers
    servers: str | None = None
    # "module:function" evaluating in its own way instead of through served evaluation
    evaluator: str | None = None


ENGINES: dict[str, Engine] = {
    # SGLang: one prompt per call by default (a batch is answered at its longest member);
    # like vLLM, the adaptive limit finds what a given server sustains below this ceiling
    "sglang": Engine(
        "eyas.backends.sglang.client:SGLangBackend",
        256,
        acceptance="eyas.backends.sglang.acceptance:SGLangAcceptance",
    ),
    # vLLM schedules up to 256 sequences by default (measured on CPU: 512 in flight 1.7x
    # faster than 64); the adaptive limit finds what a given server sustains below this
    "vllm": Engine(
        "eyas.backends.vllm.client:VLLMBackend",
        256,
        acceptance="eyas.backends.vllm.acceptance:VLLMAcceptance",
        servers="eyas.backends.vllm.server:VLLMServers",
    ),
    "openai_chat": Engine("eyas.backends.openai_chat:OpenAIChatBackend", 256),
    # prompts per in-process batch; `eyas eval --backend local` decodes offline, in process
    "local": Engine(
        "eyas.backends.local:LocalBackend", 16, evaluator="eyas.evaluate.offline:evaluate_offline"
    ),
}


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)


def engine_names() -> list[str]:
    return sorted(ENGINES)


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


def backend_class(name: str) -> type:
    return _load(ENGINES[name].backend)


# -- evaluation and servers eyas starts ---------------------------------------------------------


def eval_engine_names() -> list[str]:
    """The engines `eyas eval --backend` takes: served (an acceptance hook) or their own."""
    return [n for n in engine_names() if ENGINES[n].acceptance or ENGINES[n].evaluator]


def check_eval_engine(name: str) -> str:
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose one of {eval_engine_names()}")
    if name not in eval_engine_names():
        raise ValueError(f"engine {name!r} cannot evaluate; these can: {eval_engine_names()}")
    return name


def evaluator(name: str) -> Callable[..., dict]:
    """`(cfg, prompts, log, *, follow_ups) -> result` for `eyas eval --backend name`."""
    engine = ENGINES[name]
    return _load(engine.evaluator or SERVED_EVALUATOR)


def acceptance(name: str) -> Any:
    """The engine's acceptance hook (an instance), or a refusal when it has none."""
    spec = ENGINES[name].acceptance
    if spec is None:
        raise EyasError("bad_flag", f"engine {name} reports no speculative-decoding counts")
    return _load(spec)()


def servers(name: str) -> Any | None:
    """The engine's hook that starts local servers (an instance), None when eyas cannot."""
    spec = ENGINES[name].servers
    return _load(spec)() if spec else None


def can_start(name: str, cfg: Any) -> bool:
    """Whether eyas can start `name`'s servers with the settings of `cfg`."""
    hook = servers(name)
    return hook is not None and hook.can_start(cfg)


def start_flag(name: str) -> str | None:
    """The option that lets eyas start the engine's servers (`--vllm-python`), if any."""
    hook = servers(name)
    return hook.flag if hook is not None else None


def build_backends(
    name: str, settings: BackendSettings, urls: list[str], session=None
) -> list[Backend]:
    """One backend per URL for a served engine, one in-process backend otherwise."""
    cls = backend_class(name)
    if cls.remote:
        if not urls:
            raise EyasError("bad_flag", f"engine {name} needs at least one --url")
        return [cls.from_settings(settings, url=u, session=session) for u in urls]
    return [cls.from_settings(settings, url=None, session=None)]


@contextlib.asynccontextmanager
async def open_pool(
    name: str,
    settings: BackendSettings,
    server: ServerConfig,
    *,
    operation: str,
    concurrency: int | None = None,
) -> AsyncIterator[ServerPool]:
    """A pool of `name`'s servers as `server` (an `eyas.config.ServerConfig`) describes them,
    ready as soon as one serves (the others join when they answer; its `url_file` adds
    servers while it runs), its HTTP session and backends closed on exit. `concurrency` is the
    in-flight ceiling when `server` sets none (default: the engine's). No server ready within
    `server.ready_timeout_s` is a refusal (exit 1)."""
    try:
        check_engine(name, operation)
    except ValueError as exc:
        raise EyasError("bad_flag", str(exc)) from exc
    cls = backend_class(name)
    if server.url_file is not None and not cls.remote:
        raise EyasError("bad_flag", f"engine {name} runs in process: it takes no --url-file")
    settings = dataclasses.replace(settings, api_key=server.api_key() or settings.api_key)
    session = None
    if cls.remote:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300))
    try:
        remote_only_file = cls.remote and not server.urls and server.url_file is not None
        backends = [] if remote_only_file else build_backends(name, settings, server.urls, session)
        pool = ServerPool.from_config(
            server,
            backends,
            concurrency=concurrency or ENGINES[name].default_concurrency,
            adaptive=cls.remote,  # an in-process engine's batch is its limit
            new_backend=lambda url: cls.from_settings(settings, url=url, session=session),
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
    "eval_engine_names",
    "evaluator",
    "open_pool",
    "servers",
    "start_flag",
]
