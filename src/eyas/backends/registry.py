"""One registry of engines: a name, the backend class that speaks to it, and its default
ceiling of requests in flight. Adding an engine is one module (its backend class, with
`from_settings`, `operations` and the operations it offers) plus one line here.

    async with open_pool("vllm", settings, urls, policy, operation="capture") as pool:
        states, attempts = await pool.call(lambda b: b.capture(sample_id, ids))
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from eyas.backends.base import Backend, BackendSettings
from eyas.backends.policy import ClientPolicy, ServerPool
from eyas.backends.reasons import BackendError
from eyas.errors import EyasError, RefusedError


@dataclass(frozen=True)
class Engine:
    backend: str  # "module:Class"
    default_concurrency: int  # the in-flight ceiling when the user sets none


ENGINES: dict[str, Engine] = {
    # SGLang: one prompt per call by default (a batch is answered at its longest member);
    # like vLLM, the adaptive limit finds what a given server sustains below this ceiling
    "sglang": Engine("eyas.backends.sglang.client:SGLangBackend", 256),
    # vLLM schedules up to 256 sequences by default (measured on CPU: 512 in flight 1.7x
    # faster than 64); the adaptive limit finds what a given server sustains below this
    "vllm": Engine("eyas.backends.vllm.client:VLLMBackend", 256),
    "openai_chat": Engine("eyas.backends.openai_chat:OpenAIChatBackend", 256),
    # prompts per in-process batch
    "local": Engine("eyas.backends.local:LocalBackend", 16),
}


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
    module, _, attr = ENGINES[name].backend.partition(":")
    return getattr(importlib.import_module(module), attr)


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
    urls: list[str],
    policy: ClientPolicy,
    *,
    operation: str,
    url_file: Path | None = None,
    url_file_s: float = 5.0,
) -> AsyncIterator[ServerPool]:
    """A pool of `name`'s servers, ready as soon as one serves (the others join when they
    answer; `url_file` adds servers while it runs), its HTTP session and backends closed on
    exit. No server ready within the policy's ready_timeout_s is a refusal (exit 1)."""
    try:
        check_engine(name, operation)
    except ValueError as exc:
        raise EyasError("bad_flag", str(exc)) from exc
    session = None
    if backend_class(name).remote:
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300))
    try:
        cls = backend_class(name)
        if url_file is not None and not cls.remote:
            raise EyasError("bad_flag", f"engine {name} runs in process: it takes no --url-file")
        remote_only_file = cls.remote and not urls and url_file is not None
        backends = [] if remote_only_file else build_backends(name, settings, urls, session)
        pool = ServerPool(
            backends,
            policy,
            new_backend=lambda url: cls.from_settings(settings, url=url, session=session),
            url_file=url_file,
            url_file_s=url_file_s,
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


__all__ = ["ENGINES", "Engine", "backend_class", "check_engine", "engine_names", "open_pool"]
