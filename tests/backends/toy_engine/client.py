"""The toy engine's backend: what eyas sends a toy server."""

from __future__ import annotations

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
    wait_http_ready,
)
from toy_engine.options import ToyOptions


class ToyBackend:
    name = "toy"
    lossy = False
    remote = True
    operations = frozenset({"generate", "spec_metrics"})

    def __init__(self, url: str, session: aiohttp.ClientSession, stop_token_ids: list[int]):
        self.url = url.rstrip("/")
        self.session = session
        self.stop_token_ids = stop_token_ids
        self.headers = json_headers(None)

    @classmethod
    def from_settings(
        cls, settings: BackendSettings, options: ToyOptions, *, url, session
    ) -> ToyBackend:
        return cls(url, session, settings.stop_token_ids)

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health",), timeout_s)
        return {"url": self.url, "engine": "toy"}

    async def generate(self, request: GenRequest) -> Generation:
        payload = {
            "id": request.id,
            "ids": request.prompt_ids,
            "stop": self.stop_token_ids,
            "max_new_tokens": request.max_new_tokens,
        }
        body = await post_bytes(
            self.session, self.url + "/generate", orjson.dumps(payload), self.headers
        )
        answer = orjson.loads(body)
        ids = answer["output_ids"]
        matched = ids[-1] if answer["finish"] == "stop" else None
        return Generation(ids, answer["finish"], matched, {})

    async def spec_metrics(self) -> dict[str, Any]:
        status, text = await get_text(self.session, self.url + "/counters", self.headers)
        if status == 404:
            return {"present": False}
        if status != 200:
            raise BackendError("http_error", f"{self.url}/counters -> HTTP {status}", status)
        return {"present": True, **orjson.loads(text)}

    async def progress(self) -> Progress:
        status, _ = await get_text(self.session, self.url + "/health", self.headers)
        return Progress(alive=status == 200)

    async def close(self) -> None:
        return None
