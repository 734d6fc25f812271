"""A toy serving engine, written the way a new engine is added to eyas: this one module (its
server, its backend, how it counts speculative decoding, how eyas starts it) plus one entry in
`eyas.backends.registry.ENGINES` (`tests/backends/test_toy_serving_engine.py` adds it):

    Engine(
        "eyas.testing.toy_serving_engine:ToyBackend",
        8,
        acceptance="eyas.testing.toy_serving_engine:ToyAcceptance",
        servers="eyas.testing.toy_serving_engine:ToyServers",
    )

The server (`python -m eyas.testing.toy_serving_engine [--drafter]`) answers `POST /generate`
with token ids: the prompt's last three ids reversed, then the first stop id, at most
`max_new_tokens`. With `--drafter` it counts verify steps as a speculating server would (every
step yields `STEP_TOKENS` tokens, the last one fewer) on `GET /counters`; without it, it has no
counters (404): a server without a drafter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

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
from eyas.backends.policy import RequestFailed, ServerPool
from eyas.errors import EyasError, RefusedError

STEP_TOKENS = 3  # tokens per verify step: two accepted drafts and the bonus token


def toy_output(prompt_ids: list[int], stop_ids: list[int], max_new_tokens: int) -> list[int]:
    return [*reversed(prompt_ids[-3:]), stop_ids[0]][:max_new_tokens]


def toy_verify_steps(output_len: int) -> int:
    return -(-output_len // STEP_TOKENS)


# -- the server ----------------------------------------------------------------------------------


class ToyServer:
    def __init__(self, drafter: bool):
        self.drafter = drafter
        self.steps = 0
        self.tokens = 0

    async def generate(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        ids = toy_output(body["ids"], body["stop"], body["max_new_tokens"])
        if self.drafter:
            self.steps += toy_verify_steps(len(ids))
            self.tokens += len(ids)
        finish = "stop" if ids and ids[-1] in body["stop"] else "length"
        return web.json_response({"output_ids": ids, "finish": finish})

    async def counters(self, request: web.Request) -> web.Response:
        if not self.drafter:
            return web.Response(status=404, text="no drafter")
        return web.json_response({"verify_steps": self.steps, "tokens": self.tokens})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/generate", self.generate)
        app.router.add_get("/counters", self.counters)
        app.router.add_get("/health", self.health)
        return app


async def _serve(drafter: bool) -> None:
    runner = web.AppRunner(ToyServer(drafter).app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", action="store_true", help="speculate, and count it")
    asyncio.run(_serve(ap.parse_args().drafter))


# -- the backend: what eyas sends it ---------------------------------------------------------


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
    def from_settings(cls, settings: BackendSettings, *, url, session) -> ToyBackend:
        return cls(url, session, settings.stop_token_ids)

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health",), timeout_s)
        return {"url": self.url, "engine": "toy"}

    async def generate(self, request: GenRequest) -> Generation:
        payload = {
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


# -- how it counts speculative decoding (served `eyas eval`) --------------------------------------


async def _read(pool: ServerPool) -> dict[str, int]:
    """The counters summed over the pool's servers, each read through the client policy."""
    total = {"verify_steps": 0, "tokens": 0}
    for backend in pool.backends:
        try:
            snap, _ = await pool.call(lambda b: b.spec_metrics(), on=backend)
        except RequestFailed as exc:
            raise RefusedError(exc.error.reason, f"{backend.url}/counters: {exc.error}") from exc
        if not snap["present"]:
            raise EyasError("no_speculation", f"the toy server at {backend.url} has no drafter")
        for key in total:
            total[key] += snap[key]
    return total


class ToyAcceptance:
    source = "toy /counters"
    follows_settings = False  # the server's own drafting counts
    servers_may_join = False  # counter deltas, as vLLM's

    def check_config(self, cfg: Any) -> None:
        return None

    async def mark(self, pool: ServerPool) -> dict[str, int]:
        return await _read(pool)

    async def count(self, pool: ServerPool, mark: Any, answers: dict) -> dict[str, int]:
        now = await _read(pool)
        return {key: now[key] - mark[key] for key in now}

    def add(self, a: dict, b: dict) -> dict[str, int]:
        return {key: a.get(key, 0) + b.get(key, 0) for key in ("verify_steps", "tokens")}

    def figures(self, counts: dict, k: int) -> dict[str, Any]:
        steps, tokens = counts.get("verify_steps", 0), counts.get("tokens", 0)
        return {
            "verify_steps": steps,
            "acceptance_length": round(tokens / steps, 4) if steps else 0.0,
            "mean_accepted_drafts": round(tokens / steps - 1, 4) if steps else 0.0,
            "per_position": [],
            "histogram": None,
        }

    def check_run(self, total: dict) -> None:
        return None  # a server without a drafter is refused when its counters are read


# -- how eyas starts it --------------------------------------------------------------------------


class ToyServers:
    flag = None  # nothing to install: eyas can always start one

    def can_start(self, cfg: Any) -> bool:
        return True

    @contextlib.contextmanager
    def for_eval(self, cfg: Any, *, drafter: bool, scratch: Path, log_path: Path) -> Iterator[str]:
        from eyas.testing.server import fake_server

        args = ["--drafter"] if drafter else []
        with fake_server("eyas.testing.toy_serving_engine", *args) as server:
            yield server.url


if __name__ == "__main__":
    main()
