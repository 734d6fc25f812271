"""OpenAI-compatible `/v1/chat/completions`: text in, text out. Opt-in and LOSSY.

The server renders the prompt itself (SGLang inserts `defer_loading: null` into tools and drops
them under `tool_choice: "none"`; docs/formats.md), returns text, and eyas must re-tokenize it:
exactly the round trip bug class #3 warns about. Samples from this backend are marked lossy and
the audit's `lossy-backend` check flags them. It exists for servers that offer nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from eyas.backends.base import (
    BackendError,
    BackendSettings,
    Generation,
    GenRequest,
    json_headers,
    post_bytes,
    wait_http_ready,
)
from eyas.backends.openai_chat.options import OpenAIChatOptions


class OpenAIChatBackend:
    name = "openai_chat"
    lossy = True
    remote = True
    operations = frozenset({"generate"})

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        encode_reply: Callable[[dict], list[int]],
        model: str | None = None,
        api_key: str | None = None,
        template_kwargs: dict | None = None,
    ):
        self.url = url.rstrip("/")
        self.session = session
        self.encode_reply = encode_reply
        self.model = model
        self.template_kwargs = template_kwargs or {}
        self.headers = json_headers(api_key)

    @classmethod
    def from_settings(
        cls, settings: BackendSettings, options: OpenAIChatOptions, *, url, session
    ) -> OpenAIChatBackend:
        if settings.encode_reply is None:
            raise ValueError("the openai_chat engine needs settings.encode_reply")
        return cls(
            url,
            session,
            settings.encode_reply,
            options.served_model,
            settings.api_key,
            settings.template_kwargs,
        )

    async def generate(self, request: GenRequest) -> Generation:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_new_tokens,
            **{k: v for k, v in request.sampling.items() if v is not None},
        }
        if request.tools:
            payload["tools"] = request.tools
        if self.template_kwargs:
            payload["chat_template_kwargs"] = self.template_kwargs
        start = time.perf_counter()
        body = await post_bytes(
            self.session,
            self.url + "/v1/chat/completions",
            orjson.dumps(payload),
            self.headers,
        )
        try:
            choice = orjson.loads(body)["choices"][0]
            message = choice["message"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise BackendError("malformed_response", repr(body[:200])) from exc
        reason = choice.get("finish_reason")
        reason = "length" if reason == "length" else "stop"
        ids = self.encode_reply(message)  # re-tokenized: the lossy step
        return Generation(
            ids, reason, None, {"latency_s": time.perf_counter() - start, "lossy": True}
        )

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health", "/v1/models"), timeout_s)
        return {"url": self.url, "model": self.model, "lossy": True}

    async def progress(self) -> None:
        return None  # an unknown server: its answers are the only evidence of progress

    async def close(self) -> None:
        return None
