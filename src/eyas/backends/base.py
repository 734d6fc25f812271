"""What a backend is: one object per engine server (or the in-process model) offering the
operations eyas needs (docs/architecture.md):

- `ready(timeout_s) -> dict`: wait until it serves, and say what it is (server info);
- `generate(request) -> Generation`: exact ids in, exact ids out;
- `capture(request_id, ids) -> Tensor`: the target's hidden states [T, L, H] (vLLM, local);
- `spec_metrics() -> dict`: the engine's speculative-decoding counters (vLLM);
- `progress() -> Progress | None`: the server's own account of its work, which tells a
  queued or slow request from a dead server (see `eyas.backends.policy`);
- `close()`.

`operations` names the ones a backend offers; the registry (`eyas.backends.registry`) refuses
a stage whose engine lacks its operation. Requests go through `eyas.backends.policy.ServerPool`,
the one client policy (in-flight limits, routing, retries, timeouts, circuit breaker).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import aiohttp

from eyas.backends.reasons import (
    TRANSPORT_ERRORS,
    BackendError,
    http_error,
    transport_error,
)


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


@dataclass(frozen=True)
class Progress:
    """One look at a server's own progress. `work` is a counter that grows while the engine
    computes (tokens processed; None where the server exports none); `busy` is whether it says
    it holds requests (None where unknown). A server whose health check itself proves recent
    work (SGLang's `/health` runs through the scheduler) reports `alive=True` and no counter."""

    alive: bool
    work: float | None = None
    busy: bool | None = None


@dataclass(kw_only=True)
class BackendSettings:
    """What a stage tells any engine's backend about the run: the target, its tokens and
    what the stage needs of it; each backend takes what it needs. What only one engine reads
    is that engine's options (`eyas.backends.<engine>.options`, passed beside these)."""

    stop_token_ids: list[int] = field(default_factory=list)
    api_key: str | None = None
    model_dir: Path | None = None  # engines that run the target in process
    pad_token_id: int = 0
    trust_remote_code: bool = False
    device: str | None = None  # in process: default cuda when available
    capture_layers: list[int] | None = None  # HF hidden_states indices, the last pre-norm
    # an engine that answers in text: the reply message -> ids in the target's own format
    # (a lossy step: the ids are re-tokenized, not sampled)
    encode_reply: Any = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # the in-flight ceiling per server, set by the pool that builds the backend (an in-process
    # engine batches up to it)
    max_in_flight: int | None = None


class Backend(Protocol):
    """Built by `from_settings(settings, options, *, url, session)`: the run's
    `BackendSettings`, the engine's own options model, its server's URL (None in process) and
    the pool's HTTP session."""

    name: ClassVar[str]
    lossy: ClassVar[bool]
    remote: ClassVar[bool]  # served over HTTP: one backend per URL
    operations: ClassVar[frozenset[str]]
    url: str

    async def ready(self, timeout_s: float) -> dict[str, Any]: ...

    async def progress(self) -> Progress | None: ...

    async def close(self) -> None: ...


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

# No total timeout on a request: the pool's watchdog ends a request only when the server
# shows no progress (eyas.backends.policy). Connecting still times out, so an unreachable
# host is a connection error at once.
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30)
PROBE_TIMEOUT = aiohttp.ClientTimeout(total=30)


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
    timeout: aiohttp.ClientTimeout = REQUEST_TIMEOUT,
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


async def get_text(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None
) -> tuple[int, str]:
    """GET with the probe timeout: (status, body); transport failures raise BackendError."""
    try:
        async with session.get(url, headers=headers, timeout=PROBE_TIMEOUT) as resp:
            return resp.status, await resp.text()
    except TRANSPORT_ERRORS as exc:
        raise transport_error(exc) from exc


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
            raise BackendError("server_not_ready", f"{url}: {last} after {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


__all__ = [
    "Backend",
    "BackendError",
    "BackendSettings",
    "GenRequest",
    "Generation",
    "Progress",
    "json_headers",
    "post_bytes",
    "sampling_params",
    "wait_http_ready",
]
