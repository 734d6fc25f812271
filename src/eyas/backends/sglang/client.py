"""SGLang native `/generate` with `input_ids` (docs/formats.md).

Always sends `max_new_tokens` (server default 128), the profile's `stop_token_ids` and
`skip_special_tokens: false`; keeps `output_ids` exactly. A non-200 status and a 200 whose
`finish_reason.type` is `abort` are both failures, classified by status (see
`eyas.backends.sglang.conventions`: an abort SGLang marks 400 is permanent).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import orjson

from eyas.backends.base import (
    BackendError,
    BackendSettings,
    Generation,
    GenRequest,
    Progress,
    get_text,
    json_headers,
    post_bytes,
    sampling_params,
    wait_http_ready,
)
from eyas.backends.reasons import TRANSPORT_ERRORS, status_reason
from eyas.backends.sglang.conventions import HEALTH_PATH, SPEC_META_KEYS
from eyas.backends.sglang.options import SGLangOptions


def sglang_payload(request: GenRequest, stop_token_ids: list[int]) -> dict[str, Any]:
    params: dict[str, Any] = {
        "max_new_tokens": request.max_new_tokens,
        "stop_token_ids": stop_token_ids,
        "skip_special_tokens": False,
    }
    params.update(sampling_params(request.sampling))
    if request.sampling.get("seed") is not None:
        params["sampling_seed"] = request.sampling["seed"]
    return {"input_ids": request.prompt_ids, "sampling_params": params, "rid": request.id}


def parse_sglang_response(body: bytes) -> Generation:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BackendError("malformed_response", f"not JSON: {body[:200]!r}") from exc
    return parse_sglang_item(obj)


def abort_error(finish: dict) -> BackendError:
    """An abort, classified by the status SGLang gave it: none is transient (`server_abort`:
    a scheduler abort, a client disconnect); 400 is the request's fault (`bad_request`);
    500/503 the server's (`server_error`)."""
    status = finish.get("status_code")
    message = str(finish.get("message", ""))
    if isinstance(status, int):
        return BackendError(status_reason(status), f"SGLang abort ({status}): {message}", status)
    return BackendError("server_abort", message)


def parse_sglang_item(obj: Any) -> Generation:
    """One `{"text", "output_ids", "meta_info"}` object (a batch returns a list of them)."""
    try:
        meta = obj["meta_info"]
        finish = meta["finish_reason"]
        output_ids = obj["output_ids"]
    except (KeyError, TypeError) as exc:
        raise BackendError("malformed_response", f"{type(exc).__name__}: {exc}") from exc
    kind = finish.get("type") if isinstance(finish, dict) else None
    if kind == "abort":
        raise abort_error(finish)
    if kind not in ("stop", "length") or not isinstance(output_ids, list):
        raise BackendError("malformed_response", f"finish_reason={finish!r}")
    matched = finish.get("matched") if kind == "stop" else None
    info = {
        k: meta[k]
        for k in (
            "id",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "e2e_latency",
            "weight_version",
            *SPEC_META_KEYS,
        )
        if k in meta
    }
    # SGLang keeps the matched stop token in output_ids (detokenizer trims only `text`); if a
    # build ever trims it, restore the sampled token and say so.
    if isinstance(matched, int) and (not output_ids or output_ids[-1] != matched):
        output_ids = [*output_ids, matched]
        info["stop_token_appended"] = True
    return Generation(output_ids, kind, matched, info)


class SGLangBackend:
    """POST /generate. With `batch_size` > 1, requests that arrive in the same event-loop tick
    go out as one SGLang batch (`input_ids` as a list of lists, one `sampling_params` dict per
    item): fewer HTTP round trips for client and server; each item still succeeds, fails and
    retries on its own. An HTTP error fails the whole batch; a 400 is resent item by item,
    because SGLang answers a batch with 400 when any one item is bad (its tokenizer manager
    gathers the items and the first `ValueError` becomes the response)."""

    name = "sglang"
    lossy = False
    remote = True
    operations = frozenset({"generate"})

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        stop_token_ids: list[int],
        api_key: str | None = None,
        batch_size: int = 1,
    ):
        self.url = url.rstrip("/")
        self.session = session
        self.stop_token_ids = stop_token_ids
        self.batch_size = batch_size
        self.headers = json_headers(api_key)
        self._pending: list[tuple[GenRequest, asyncio.Future]] = []
        self._scheduled = False
        self._tasks: set[asyncio.Task] = set()

    @classmethod
    def from_settings(
        cls, settings: BackendSettings, options: SGLangOptions, *, url, session
    ) -> SGLangBackend:
        return cls(url, session, settings.stop_token_ids, settings.api_key, options.batch_size)

    async def _post(self, payload: bytes) -> bytes:
        return await post_bytes(self.session, self.url + "/generate", payload, self.headers)

    async def generate(self, request: GenRequest) -> Generation:
        if self.batch_size > 1:
            return await self._enqueue(request)
        start = time.perf_counter()
        body = await self._post(orjson.dumps(sglang_payload(request, self.stop_token_ids)))
        gen = parse_sglang_response(body)
        gen.meta["latency_s"] = time.perf_counter() - start
        return gen

    def _enqueue(self, request: GenRequest) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.append((request, fut))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._dispatch)
        return fut

    def _dispatch(self) -> None:
        self._scheduled = False
        while self._pending:
            items, self._pending = (
                self._pending[: self.batch_size],
                self._pending[self.batch_size :],
            )
            self._spawn(items)

    def _spawn(self, items: list[tuple[GenRequest, asyncio.Future]]) -> None:
        task = asyncio.get_running_loop().create_task(self._send_batch(items))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send_batch(self, items: list[tuple[GenRequest, asyncio.Future]]) -> None:
        items = [(r, f) for r, f in items if not f.done()]  # the pool gave up on the others
        if not items:
            return
        payloads = [sglang_payload(r, self.stop_token_ids) for r, _ in items]
        batch = {
            "input_ids": [p["input_ids"] for p in payloads],
            "sampling_params": [p["sampling_params"] for p in payloads],
            "rid": [p["rid"] for p in payloads],
        }
        start = time.perf_counter()
        try:
            body = await self._post(orjson.dumps(batch))
            try:
                objs = orjson.loads(body)
            except orjson.JSONDecodeError as exc:
                raise BackendError("malformed_response", f"not JSON: {body[:200]!r}") from exc
            if not isinstance(objs, list) or len(objs) != len(items):
                raise BackendError("malformed_response", "batch answer of the wrong length")
        except BackendError as exc:
            if exc.reason == "bad_request" and len(items) > 1:
                for item in items:  # find the bad item; the others are fine
                    self._spawn([item])
                return
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(exc)
            return
        elapsed = time.perf_counter() - start
        for (_, fut), obj in zip(items, objs):
            if fut.done():
                continue
            try:
                gen = parse_sglang_item(obj)
            except BackendError as exc:
                fut.set_exception(exc)
                continue
            gen.meta["latency_s"] = elapsed
            fut.set_result(gen)

    async def progress(self) -> Progress:
        """SGLang's `/health` answers 200 only when its scheduler has sent output within the
        last 20 s (see the conventions): an answer is itself progress."""
        status, _ = await get_text(self.session, self.url + HEALTH_PATH, self.headers)
        return Progress(alive=status == 200)

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health", "/health_generate"), timeout_s)
        info: dict[str, Any] = {"url": self.url}
        for path in ("/get_model_info", "/get_server_info"):
            try:
                async with self.session.get(self.url + path, headers=self.headers) as r:
                    if r.status == 200:
                        data = orjson.loads(await r.read())
                        keep = (
                            "model_path",
                            "tokenizer_path",
                            "weight_version",
                            "version",
                            "speculative_algorithm",
                            "speculative_num_steps",
                        )
                        info.update({k: data[k] for k in keep if k in data})
            except (*TRANSPORT_ERRORS, orjson.JSONDecodeError):
                pass
        return info

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
