"""The one backend interface: `generate(request) -> Generation`, async (docs/architecture.md)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp


@dataclass(kw_only=True)
class GenRequest:
    """One prompt to complete. `prompt_ids` is the truth; `messages`/`tools` only serve the
    lossy chat backend and provenance."""

    id: str
    prompt_ids: list[int]
    max_new_tokens: int
    sampling: dict[str, Any]
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)


@dataclass
class Generation:
    output_ids: list[int]
    finish_reason: str  # stop | length
    matched_stop: int | str | None
    meta: dict[str, Any] = field(default_factory=dict)


class BackendError(Exception):
    """A failed request. `reason` is a stable snake_case code; `retryable` drives the retry
    policy (connection errors, timeouts, 408/429/5xx, aborts, malformed bodies)."""

    def __init__(self, reason: str, detail: str, retryable: bool, status: int | None = None):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = retryable
        self.status = status


def http_error(status: int, body: bytes) -> BackendError:
    detail = body[:300].decode("utf-8", "replace")
    if status == 408:
        return BackendError("server_timeout", detail, True, status)
    if status == 429:
        return BackendError("rate_limited", detail, True, status)
    if status >= 500:
        return BackendError("server_error", detail, True, status)
    if status == 400:
        return BackendError("bad_request", detail, False, status)
    return BackendError(f"http_{status}", detail, False, status)


def transport_error(exc: BaseException) -> BackendError:
    if isinstance(exc, asyncio.TimeoutError):
        return BackendError("timeout", "no response within the request timeout", True)
    return BackendError("connection_error", f"{type(exc).__name__}: {exc}", True)


TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)

# Sampling parameters both servers accept under these names (bug class #13: real names only).
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "frequency_penalty",
    "presence_penalty",
)


def sampling_params(sampling: dict[str, Any]) -> dict[str, Any]:
    """The set sampling values among SAMPLING_KEYS (None means unset)."""
    return {k: sampling[k] for k in SAMPLING_KEYS if sampling.get(k) is not None}


def json_headers(api_key: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


async def post_bytes(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    headers: dict[str, str],
    timeout: aiohttp.ClientTimeout,
) -> bytes:
    """POST and return the body of a 200; anything else becomes a classified BackendError."""
    try:
        async with session.post(url, data=payload, headers=headers, timeout=timeout) as resp:
            body = await resp.read()
            status = resp.status
    except TRANSPORT_ERRORS as exc:
        raise transport_error(exc) from exc
    if status != 200:
        raise http_error(status, body)
    return body


class Backend(Protocol):
    name: str
    url: str
    lossy: bool

    async def generate(self, request: GenRequest) -> Generation: ...

    async def ready(self, timeout_s: float) -> dict[str, Any]: ...

    async def close(self) -> None: ...


async def wait_http_ready(
    session: aiohttp.ClientSession, url: str, paths: tuple[str, ...], timeout_s: float
) -> None:
    """Poll `url + path` until one answers 200, or raise BackendError after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    while True:
        for path in paths:
            try:
                async with session.get(url + path, timeout=aiohttp.ClientTimeout(total=10)) as r:
                    if r.status == 200:
                        return
                    last = f"{path} -> HTTP {r.status}"
            except TRANSPORT_ERRORS as exc:
                last = f"{path}: {type(exc).__name__}"
        if loop.time() > deadline:
            raise BackendError("server_not_ready", f"{url}: {last} after {timeout_s:.0f}s", False)
        await asyncio.sleep(0.5)
