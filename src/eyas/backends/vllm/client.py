"""vLLM with token ids in and out (docs/formats.md).

`/v1/completions` with a token-id `prompt` and `return_token_ids: true` (the returned
`prompt_token_ids` must equal what was sent), or `/inference/v1/generate` (needs the server
flag `--enable-scale-out`, else HTTP 403).
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp
import orjson

from eyas.backends.base import (
    TRANSPORT_ERRORS,
    BackendError,
    Generation,
    GenRequest,
    json_headers,
    post_bytes,
    sampling_params,
    wait_http_ready,
)


def _sampling(request: GenRequest, stop_token_ids: list[int]) -> dict[str, Any]:
    params: dict[str, Any] = {
        "max_tokens": request.max_new_tokens,  # vLLM's default is 16
        "stop_token_ids": stop_token_ids,
        "skip_special_tokens": False,
    }
    params.update(sampling_params(request.sampling))
    if request.sampling.get("seed") is not None:
        params["seed"] = request.sampling["seed"]
    return params


def _finish(choice: dict, output_ids: list[int]) -> Generation:
    reason = choice.get("finish_reason")
    if reason == "abort":
        raise BackendError("server_abort", "vLLM finish_reason abort", True)
    if reason not in ("stop", "length") or not isinstance(output_ids, list):
        raise BackendError("malformed_response", f"finish_reason={reason!r}", True)
    matched = choice.get("stop_reason")
    if reason == "stop" and matched is None and output_ids:
        matched = output_ids[-1]  # EOS: vLLM reports stop_reason null
    return Generation(output_ids, reason, matched, {})


class VLLMBackend:
    name = "vllm"
    lossy = False

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        stop_token_ids: list[int],
        timeout_s: float = 600.0,
        api_key: str | None = None,
        endpoint: str = "completions",
        model: str | None = None,
    ):
        if endpoint not in ("completions", "generate"):
            raise ValueError("vLLM endpoint is 'completions' or 'generate'")
        self.url = url.rstrip("/")
        self.session = session
        self.stop_token_ids = stop_token_ids
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.endpoint = endpoint
        self.model = model
        self.headers = json_headers(api_key)

    async def _post(self, path: str, payload: dict) -> dict:
        body = await post_bytes(
            self.session, self.url + path, orjson.dumps(payload), self.headers, self.timeout
        )
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BackendError("malformed_response", repr(body[:200]), True) from exc

    async def generate(self, request: GenRequest) -> Generation:
        start = time.perf_counter()
        params = _sampling(request, self.stop_token_ids)
        try:
            if self.endpoint == "completions":
                payload = {
                    "model": self.model,
                    "prompt": request.prompt_ids,
                    "return_token_ids": True,
                    **params,
                }
                obj = await self._post("/v1/completions", payload)
                choice = obj["choices"][0]
                echoed = choice.get("prompt_token_ids")
                if echoed is not None and echoed != request.prompt_ids:
                    raise BackendError(
                        "prompt_mismatch", "server prompt_token_ids differ from the ids sent", False
                    )
                gen = _finish(choice, choice["token_ids"])
            else:
                payload = {
                    "token_ids": request.prompt_ids,
                    # ids are the record: the server need not detokenize at all
                    "sampling_params": {**params, "detokenize": False},
                    "request_id": request.id,
                    "model": self.model,
                }
                obj = await self._post("/inference/v1/generate", payload)
                choice = obj["choices"][0]
                gen = _finish(choice, choice["token_ids"])
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError("malformed_response", f"{type(exc).__name__}: {exc}", True) from exc
        gen.meta.update(
            {
                "latency_s": time.perf_counter() - start,
                "system_fingerprint": obj.get("system_fingerprint"),
            }
        )
        return gen

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health", "/v1/models"), timeout_s)
        info: dict[str, Any] = {"url": self.url}
        try:
            async with self.session.get(self.url + "/v1/models", headers=self.headers) as r:
                data = orjson.loads(await r.read())
                served = [m["id"] for m in data.get("data", [])]
                info["served_models"] = served
                if self.model is None and served:
                    self.model = served[0]
            async with self.session.get(self.url + "/version", headers=self.headers) as r:
                if r.status == 200:
                    info["version"] = orjson.loads(await r.read()).get("version")
        except (*TRANSPORT_ERRORS, orjson.JSONDecodeError, KeyError, TypeError):
            pass
        info["model"] = self.model
        return info

    async def close(self) -> None:
        return None
