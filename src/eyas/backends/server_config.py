"""How a command talks to its engine's servers: the client policy's settings
(`eyas.backends.policy`), the same fields, flags and meaning in every command that sends
requests (generate's `backend`, capture's and eval's `server`, train's `capture_server`); only
the defaults differ per command. `eyas.backends.registry.open_pool` builds the pool from it.

It lives with the client policy it configures, so the engine layer never imports the commands'
configs (`eyas.config` re-exports it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from eyas.options import Strict, check_urls


class RetryConfig(Strict):
    max_attempts: int = Field(5, ge=1, description="tries per request")
    backoff_s: float = Field(
        1.0, ge=0.0, description="first retry pause (doubles per attempt, with jitter)"
    )
    max_backoff_s: float = Field(60.0, ge=0.0, description="longest retry pause")
    max_consecutive_failures: int = Field(
        64,
        ge=0,
        description="stop (resumably) after this many jobs in a row fail on transport or 5xx "
        "errors: the servers are down, not the data; 0 never stops",
    )


class ServerConfig(Strict):
    """The servers a command asks and how it asks them (the client policy)."""

    urls: list[str] = Field(default_factory=list, description="server URL; repeat for several")
    url_file: Path | None = Field(
        None,
        description="a file of server URLs, one a line, re-read every url_file_s while the "
        "run lasts: servers listed later join the run (e.g. each Slurm node appends its own)",
    )
    url_file_s: float = Field(5.0, gt=0, description="seconds between reads of url_file")
    concurrency: int | None = Field(
        None,
        ge=1,
        description="most requests in flight per server (default per command and engine: "
        "generate 256 on vllm, sglang and openai_chat, 16 per batch on local; capture 8; "
        "served eval every prompt of a dataset at once)",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="start low and raise the in-flight limit only while the server's measured "
        "throughput grows (never above concurrency); off: always concurrency",
    )
    timeout_s: float = Field(
        600.0,
        gt=0,
        description="seconds a request may wait without its server showing progress (a queued "
        "or long request on a working server is never resubmitted)",
    )
    ready_timeout_s: float = Field(600.0, ge=0, description="seconds to wait for the servers")
    retry: RetryConfig = Field(default_factory=RetryConfig)
    api_key_env: str | None = Field(
        None, description="environment variable holding the API key (the key is never stored)"
    )

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        return check_urls(urls)

    def api_key(self) -> str | None:
        """The key from `api_key_env` (read when the pool opens, never stored)."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def serving(self, urls: list[str]) -> ServerConfig:
        """These settings for other servers: `urls` only (servers eyas started, or eval's
        baseline servers)."""
        return self.model_copy(update={"urls": list(urls), "url_file": None})


# the option names of ServerConfig keys whose flags predate it (others: the dashed key)
_OPTION_NAMES = {"urls": "url", "timeout_s": "timeout"}


def server_option_keys() -> tuple[tuple[str, str], ...]:
    """(dotted key under a ServerConfig, option name without dashes) for every setting: the
    flags each server-talking command generates (`eyas train` prefixes them `capture-`)."""
    keys = [k for k in ServerConfig.model_fields if k != "retry"]
    keys += [f"retry.{k}" for k in RetryConfig.model_fields]
    return tuple((k, _OPTION_NAMES.get(k, k.split(".")[-1].replace("_", "-"))) for k in keys)


def server_defaults(**kw: Any) -> Callable[[], ServerConfig]:
    """A command's own defaults for its `ServerConfig` (retry keys go to `retry`)."""
    retry = {k: kw.pop(k) for k in list(kw) if k in RetryConfig.model_fields}

    def make() -> ServerConfig:
        return ServerConfig(**kw, retry=RetryConfig(**retry))

    return make


__all__ = ["RetryConfig", "ServerConfig", "server_defaults", "server_option_keys"]
