"""The toy server and the class that starts it.

    python -m toy_engine.server --port P [--drafter] [--step-tokens N] [--busy-first] [--oom]

`POST /generate` answers token ids: the prompt's last three ids reversed, then the first stop
id, at most `max_new_tokens`. With `--drafter` it counts verify steps as a speculating server
would (every step yields `--step-tokens` tokens, the last one fewer) on `GET /counters`;
without it, it has no counters (404): a server without a drafter. `--busy-first` answers each
request id's first attempt with 503; `--oom` prints an out-of-memory line and serves nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from eyas.backends.server import EngineServer

STEP_TOKENS = 3  # default tokens per verify step: two accepted drafts and the bonus token


def toy_output(prompt_ids: list[int], stop_ids: list[int], max_new_tokens: int) -> list[int]:
    return [*reversed(prompt_ids[-3:]), stop_ids[0]][:max_new_tokens]


def toy_verify_steps(output_len: int, step_tokens: int = STEP_TOKENS) -> int:
    return -(-output_len // step_tokens)


# -- the class eyas starts it with --------------------------------------------------------------


class ToyServer(EngineServer):
    ENGINE = "toy"
    READY_PATHS = ("/health",)
    FATAL = ((r"toy: out of memory", "server_oom"),)

    def command(self, port: int) -> list[str]:
        own = ["--busy-first"] if self.options.busy_first else []
        return [
            str(self.options.python),
            "-m",
            "toy_engine.server",
            "--port",
            str(port),
            *own,
            *self.args,
            *self.options.args,
        ]

    def environment(self) -> dict[str, str]:
        env = super().environment()
        here = str(Path(__file__).resolve().parents[1])  # the folder holding this package
        env["PYTHONPATH"] = ":".join(filter(None, [here, env.get("PYTHONPATH")]))
        return env

    @classmethod
    def drafter_launch(cls, speculative_config: dict[str, Any], dtype: str) -> list[str]:
        return ["--drafter"]


# -- the server ---------------------------------------------------------------------------------


class _Toy:
    def __init__(self, drafter: bool, step_tokens: int, busy_first: bool):
        self.drafter = drafter
        self.step_tokens = step_tokens
        self.busy_first = busy_first
        self.seen: set[str] = set()
        self.steps = 0
        self.tokens = 0

    async def generate(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        if self.busy_first and body["id"] not in self.seen:
            self.seen.add(body["id"])
            return web.Response(status=503, text="toy: busy (first attempt)")
        ids = toy_output(body["ids"], body["stop"], body["max_new_tokens"])
        if self.drafter:
            self.steps += toy_verify_steps(len(ids), self.step_tokens)
            self.tokens += len(ids)
        finish = "stop" if ids and ids[-1] in body["stop"] else "length"
        return web.json_response({"output_ids": ids, "finish": finish})

    async def counters(self, request: web.Request) -> web.Response:
        if not self.drafter:
            return web.Response(status=404, text="no drafter")
        return web.json_response({"verify_steps": self.steps, "tokens": self.tokens})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--drafter", action="store_true", help="speculate, and count it")
    ap.add_argument("--step-tokens", type=int, default=STEP_TOKENS)
    ap.add_argument("--busy-first", action="store_true")
    ap.add_argument("--oom", action="store_true", help="say it is out of memory, serve nothing")
    args = ap.parse_args()
    if args.oom:  # a server that cannot serve and says so in its log, without exiting
        print("toy: out of memory (asked to be)", flush=True)
        while True:
            time.sleep(1)
    toy = _Toy(args.drafter, args.step_tokens, args.busy_first)
    app = web.Application()
    app.router.add_post("/generate", toy.generate)
    app.router.add_get("/counters", toy.counters)
    app.router.add_get("/health", toy.health)
    print(f"toy: serving on {args.port} (drafter: {args.drafter})", flush=True)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
