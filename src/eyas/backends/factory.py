"""Build the configured backends (one per server URL, or the in-process model)."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp

from eyas.backends.base import Backend
from eyas.config import BackendConfig
from eyas.render.renderer import Renderer


def build_backends(
    cfg: BackendConfig,
    renderer: Renderer,
    model_dir: Path,
    session: aiohttp.ClientSession,
    trust_remote_code: bool = False,
) -> list[Backend]:
    stop = renderer.stop_token_ids()
    api_key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
    if cfg.kind == "local":
        from eyas.backends.local import LocalBackend

        pad = renderer.tokenizer.pad_token_id or 0
        return [
            LocalBackend(model_dir, stop, pad, cfg.concurrency, trust_remote_code=trust_remote_code)
        ]
    if cfg.kind == "sglang":
        from eyas.backends.sglang import SGLangBackend

        return [
            SGLangBackend(u, session, stop, cfg.timeout_s, api_key, cfg.batch_size)
            for u in cfg.urls
        ]
    if cfg.kind == "vllm":
        from eyas.backends.vllm import VLLMBackend

        return [
            VLLMBackend(
                u, session, stop, cfg.timeout_s, api_key, cfg.vllm_endpoint, cfg.served_model
            )
            for u in cfg.urls
        ]
    from eyas.backends.openai_chat import OpenAIChatBackend

    thinking = renderer.thinking is not False

    def encode_reply(message: dict) -> list[int]:
        # the lossy step: the reply's text re-serialised in the model's own format, re-tokenized
        return renderer.encode(renderer.model_format.completion_text(message, thinking))

    return [
        OpenAIChatBackend(
            u,
            session,
            encode_reply,
            cfg.served_model,
            cfg.timeout_s,
            api_key,
            renderer.template_kwargs,
        )
        for u in cfg.urls
    ]
