"""vLLM with token ids in and out (docs/formats.md): generation, hidden-state capture, the
speculative-decoding counters and the server's progress, from one backend object.

Generation: `/v1/completions` with a token-id `prompt` and `return_token_ids: true` (the
returned `prompt_token_ids` must equal what was sent), or `/inference/v1/generate` (needs the
server flag `--enable-scale-out`, else HTTP 403). Capture: the full sequence as the prompt and
one new token, on a server started for capture (`VLLMServer.capture_launch`).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

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
from eyas.backends.reasons import TRANSPORT_ERRORS
from eyas.backends.vllm.capture import read_capture_file
from eyas.backends.vllm.conventions import (
    METRICS_PATH,
    READY_PATHS,
    parse_progress,
    parse_spec_metrics,
)
from eyas.backends.vllm.options import VLLMOptions

if TYPE_CHECKING:
    import torch


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
        raise BackendError("server_abort", "vLLM finish_reason abort")
    if reason not in ("stop", "length") or not isinstance(output_ids, list):
        raise BackendError("malformed_response", f"finish_reason={reason!r}")
    matched = choice.get("stop_reason")
    if reason == "stop" and matched is None and output_ids:
        matched = output_ids[-1]  # EOS: vLLM reports stop_reason null
    return Generation(output_ids, reason, matched, {})


class VLLMBackend:
    name = "vllm"
    lossy = False
    remote = True
    operations = frozenset({"generate", "capture", "spec_metrics"})

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        stop_token_ids: list[int],
        api_key: str | None = None,
        endpoint: str = "completions",
        model: str | None = None,
    ):
        if endpoint not in ("completions", "generate"):
            raise ValueError("vLLM endpoint is 'completions' or 'generate'")
        self.url = url.rstrip("/")
        self.session = session
        self.stop_token_ids = stop_token_ids
        self.endpoint = endpoint
        self.model = model
        self.headers = json_headers(api_key)

    @classmethod
    def from_settings(
        cls, settings: BackendSettings, options: VLLMOptions, *, url, session
    ) -> VLLMBackend:
        return cls(
            url,
            session,
            settings.stop_token_ids,
            settings.api_key,
            options.endpoint,
            options.served_model,
        )

    async def _post(self, path: str, payload: dict) -> dict:
        body = await post_bytes(self.session, self.url + path, orjson.dumps(payload), self.headers)
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BackendError("malformed_response", repr(body[:200])) from exc
        if not isinstance(obj, dict):
            raise BackendError("malformed_response", repr(body[:200]))
        return obj

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
                        "prompt_mismatch", "server prompt_token_ids differ from the ids sent"
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
            raise BackendError("malformed_response", f"{type(exc).__name__}: {exc}") from exc
        gen.meta.update(
            {
                "latency_s": time.perf_counter() - start,
                "system_fingerprint": obj.get("system_fingerprint"),
            }
        )
        return gen

    async def capture(self, request_id: str, ids: list[int]) -> torch.Tensor:
        """The prompt's hidden states [T, L, H]: one completion of one token; the connector
        writes the states to shared storage and the response names the file."""
        payload = {
            "model": self.model,
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        obj = await self._post("/v1/completions", payload)
        choices = obj.get("choices") or [{}]
        if isinstance(choices[0], dict) and choices[0].get("finish_reason") == "abort":
            raise BackendError("server_abort", f"{request_id}: vLLM finish_reason abort")
        path = (obj.get("kv_transfer_params") or {}).get("hidden_states_path")
        if not isinstance(path, str):
            raise BackendError(
                "no_hidden_states",
                "the response names no hidden_states_path: is the server running with "
                "--speculative-config extract_hidden_states and the eyas connector?",
            )
        data = await asyncio.to_thread(read_capture_file, path)
        if data["token_ids"].tolist() != list(ids):
            raise BackendError("prompt_mismatch", f"{path}: token ids differ from those sent")
        return data["hidden_states"]

    async def spec_metrics(self) -> dict[str, Any]:
        """vLLM's speculative-decoding counters now (see `parse_spec_metrics`)."""
        status, text = await get_text(self.session, self.url + METRICS_PATH, self.headers)
        if status != 200:
            raise BackendError("http_error", f"{self.url}{METRICS_PATH} -> HTTP {status}", status)
        return parse_spec_metrics(text)

    async def progress(self) -> Progress:
        status, text = await get_text(self.session, self.url + METRICS_PATH, self.headers)
        if status != 200:
            return Progress(alive=False)
        work, busy = parse_progress(text)
        return Progress(alive=True, work=work, busy=busy)

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, READY_PATHS, timeout_s)
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
