"""A fake SGLang server for fault injection and protocol tests (SGLang cannot run on CPU).

Responses reproduce the shape captured from a real SGLang 0.5.23 server
(`shared/reference/sglang-generate-response.json`) field for field; outputs are deterministic
functions of the input ids, so tests can predict them. Faults are injected at random per
request (so a retried request can succeed), or in a fixed order on the first requests:

    python -m eyas.testing.fake_sglang --port 0 --fault-rate 0.15 \\
        --faults 500,503,429,400,hang,reset,malformed,abort,slow --seed 1
    python -m eyas.testing.fake_sglang --fault-schedule 500,503,429,reset,malformed,abort,400
    python -m eyas.testing.fake_sglang --tokenizer DIR --context-length 2048 --load-s 2 \\
        --spec-steps 3
    python -m eyas.testing.fake_sglang --capacity 4 --service-s 0.2   # a slow, busy server

Behaviour that matches SGLang's:
- with `--tokenizer`, outputs are ids of that vocabulary, shaped like a thinking model's
  (reasoning, `</think>`, content, sometimes a tool-call section), cut at the first stop id or
  EOS (unless `ignore_eos`), with the matched id kept in `output_ids` and `text` decoded with
  `skip_special_tokens` (SGLang's default: true);
- `/health` (and `/generate`) answer 503 for `--load-s` seconds after start, while "loading";
  afterwards `/health` answers 200 while the server serves (SGLang's answers only when its
  scheduler made progress, `eyas.backends.sglang.conventions`);
- a prompt of `--context-length` tokens or more is a 400, and one such prompt in a batch fails
  the whole batch with 400 (SGLang gathers a batch's items);
- `/get_server_info` serves the server arguments;
- an abort before prefill returns no ids; `abort400` is the abort `Req.set_finish_with_abort`
  builds (`status_code` 400, `err_type` BadRequestError), as a streamed response carries it;
- with `--spec-steps K`, `meta_info` carries `spec_verify_ct`, `spec_num_correct_drafts` and
  `spec_num_proposed_drafts` as an EAGLE server reports them (the first token comes from
  prefill; each verify step accepts a deterministic 0..K drafts plus one bonus token), and, as
  `fill_spec_decoding_meta` in SGLang's `tokenizer_manager_components/spec_decoding_meta.py`
  does, none of them when the request had no verify step (a one-token answer);
- with `--short-every N`, every Nth prompt (by its ids) ends at its first token;
- with `--capacity N`, at most N requests (or batch calls) are computed at once, each for
  `--service-s` seconds; the rest wait in the server's queue;
- the latency model (`--token-s S`): each output is as long as a long-tailed draw allows
  (`--length-median 470 --length-sigma 1.2`: a lognormal, deterministic per prompt, cut at
  `max_new_tokens`; mean 470 x exp(1.2^2/2) ~ 970 tokens, about 1 output in 185 past 10,000)
  and decodes for S seconds a token in one of `--decode-slots N` sequence slots (queued
  until one is free; unlimited by default). A non-streaming batch is answered when its
  longest member is done, as SGLang's is (its tokenizer manager gathers the items). GET
  `/fake_stats` gives the time integrals of sequences held (received, not yet answered) and
  decoding, so a benchmark reads the fraction of in-flight slots that decode.

The first stdout line is `PORT <n>` once the server listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import random
import time
import uuid
import zlib
from collections import Counter

import orjson
from aiohttp import web

FAULTS = ("500", "503", "429", "400", "hang", "reset", "malformed", "abort", "slow", "abort400")


class FaultInjector:
    """Which fault the next request meets: the next of a fixed `schedule` (then none), else
    one of `kinds` with probability `rate`. The fake servers share it, so a schedule puts the
    same faults in front of every stage."""

    def __init__(
        self,
        rate: float = 0.0,
        kinds: tuple[str, ...] = (),
        seed: int = 0,
        schedule: tuple[str, ...] = (),
    ):
        self.rate = rate
        self.kinds = kinds
        self.schedule = list(schedule)
        self.rng = random.Random(seed)
        self.injected: Counter = Counter()

    def next(self) -> str | None:
        if self.schedule:
            fault: str | None = self.schedule.pop(0)
        elif self.kinds and self.rng.random() < self.rate:
            fault = self.rng.choice(self.kinds)
        else:
            fault = None
        if fault:
            self.injected[fault] += 1
        return fault


def parse_faults(text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    faults = tuple(f for f in text.split(",") if f)
    unknown = set(faults) - set(allowed)
    if unknown:
        raise SystemExit(f"unknown faults {sorted(unknown)}; choose from {allowed}")
    return faults


def fake_output(
    input_ids: list[int],
    max_new_tokens: int,
    stop_token_ids: list[int],
    vocab_size: int = 4000,
    fixed_len: int | None = None,
) -> tuple[list[int], dict]:
    """Deterministic output ids and finish_reason for a prompt (also used by tests)."""
    # how long this prompt "wants" to talk
    natural = fixed_len or 1 + zlib.crc32(orjson.dumps(input_ids)) % 600
    base = sum(input_ids[-8:])
    low = 32  # stay clear of special-token ids
    if natural < max_new_tokens and stop_token_ids:
        ids = [low + (base + 7 * k * k + 13 * k) % (vocab_size - low) for k in range(natural)]
        ids.append(stop_token_ids[0])
        return ids, {"type": "stop", "matched": stop_token_ids[0]}
    ids = [low + (base + 7 * k * k + 13 * k) % (vocab_size - low) for k in range(max_new_tokens)]
    return ids, {"type": "length", "length": max_new_tokens}


def chat_prompt_ids(messages: list[dict], vocab_size: int = 4000) -> list[int]:
    """Stand-in for server-side chat rendering: a word `wN` is token N, any other word a
    hashed id; each message is framed by two marker ids."""
    ids: list[int] = []
    for m in messages:
        ids.append(5)
        for word in str(m.get("content") or "").split():
            if word[:1] == "w" and word[1:].isdigit():
                ids.append(int(word[1:]))
            else:
                ids.append(32 + zlib.crc32(word.encode()) % (vocab_size - 32))
        ids.append(4)
    return ids or [1]


class LatencyModel:
    """Output lengths from a lognormal draw and decode time per token, with the time
    integrals of sequences held and decoding (see the module docstring)."""

    def __init__(self, token_s: float, median: float, sigma: float, slots: int | None):
        self.token_s, self.median, self.sigma, self.slots = token_s, median, sigma, slots
        self._sem: asyncio.Semaphore | None = None
        self.held = self.decoding = 0
        self.held_s = self.decoding_s = 0.0
        self.tokens = self.items = 0
        self._last = time.monotonic()

    def length(self, input_ids: list[int]) -> int:
        """The prompt's natural output length: lognormal, deterministic in its ids."""
        rng = random.Random(zlib.crc32(orjson.dumps(input_ids)))
        return max(1, round(rng.lognormvariate(math.log(self.median), self.sigma)))

    def _tick(self, held: int = 0, decoding: int = 0) -> None:
        now = time.monotonic()
        self.held_s += self.held * (now - self._last)
        self.decoding_s += self.decoding * (now - self._last)
        self._last = now
        self.held += held
        self.decoding += decoding

    async def decode(self, lengths: list[int]) -> None:
        """Hold the items until the longest is done; each decodes in a slot of its own."""
        if self.slots and self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        self._tick(held=len(lengths))
        try:
            await asyncio.gather(*(self._one(n) for n in lengths))
        finally:
            self._tick(held=-len(lengths))
            self.items += len(lengths)

    async def _one(self, n: int) -> None:
        async with self._sem or contextlib.nullcontext():
            self._tick(decoding=1)
            try:
                await asyncio.sleep(n * self.token_s)
            finally:
                self._tick(decoding=-1)
                self.tokens += n

    def stats(self) -> dict:
        self._tick()
        return {
            "held": self.held,
            "decoding": self.decoding,
            "held_s": self.held_s,
            "decoding_s": self.decoding_s,
            "tokens": self.tokens,
            "items": self.items,
        }


class FakeSGLang:
    def __init__(
        self,
        fault_rate: float = 0.0,
        faults: tuple[str, ...] = (),
        seed: int = 0,
        hang_s: float = 30.0,
        slow_s: float = 0.3,
        model_path: str = "/models/fake",
        fixed_len: int | None = None,
        tokenizer_dir: str | None = None,
        context_length: int | None = None,
        load_s: float = 0.0,
        spec_steps: int = 0,
        schedule: tuple[str, ...] = (),
        capacity: int | None = None,
        service_s: float = 0.0,
        short_every: int = 0,
        token_s: float = 0.0,
        length_median: float = 470.0,
        length_sigma: float = 1.2,
        decode_slots: int | None = None,
    ):
        self.faults = FaultInjector(fault_rate, faults, seed, schedule)
        self.latency = LatencyModel(token_s, length_median, length_sigma, decode_slots)
        self.short_every = short_every
        self.capacity = capacity
        self.service_s = service_s
        self._slots: asyncio.Semaphore | None = None
        self.num_waiting = 0
        self.num_running = 0
        self.hang_s = hang_s
        self.slow_s = slow_s
        self.model_path = model_path
        self.fixed_len = fixed_len
        self.num_requests = 0
        self.context_length = context_length
        self.spec_steps = spec_steps
        self.load_s = load_s
        self.ready_at = 0.0  # set when the server starts listening
        self.tokenizer = None
        if tokenizer_dir:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
            self.vocab = self.tokenizer.get_vocab()

    def _loading(self) -> web.Response | None:
        if time.time() < self.ready_at:
            return web.json_response({"error": {"message": "Server is loading"}}, status=503)
        return None

    def _vocab_output(self, input_ids: list[int], params: dict) -> tuple[list[int], dict]:
        """A thinking model's output in this vocabulary, deterministic in the prompt."""
        h = zlib.crc32(orjson.dumps(input_ids))
        rng = random.Random(h)
        special = set(self.tokenizer.all_special_ids)
        words = [i for i in range(len(self.vocab)) if i not in special]
        v = self.vocab
        ids = [rng.choice(words) for _ in range(rng.randint(3, 30))]
        if "</think>" in v:
            ids.append(v["</think>"])
        ids += [rng.choice(words) for _ in range(rng.randint(1, 40))]
        if "<|tool_calls_section_begin|>" in v and h % 3 == 0:
            ids += [v["<|tool_calls_section_begin|>"], v["<|tool_call_begin|>"]]
            ids += self.tokenizer.encode("functions.lookup:0", add_special_tokens=False)
            ids += [v["<|tool_call_argument_begin|>"]]
            ids += self.tokenizer.encode('{"q": 1}', add_special_tokens=False)
            ids += [v["<|tool_call_end|>"], v["<|tool_calls_section_end|>"]]
        asked = list(params.get("stop_token_ids") or [])
        stops = set(asked)
        eos = self.tokenizer.eos_token_id
        if not params.get("ignore_eos") and eos is not None:
            stops.add(eos)
        # the model ends its turn with the end-of-turn token asked for, else with EOS
        ids.append(asked[0] if asked else eos if eos is not None else rng.choice(words))
        cap = int(params.get("max_new_tokens", 128))
        for k, t in enumerate(ids[:cap]):
            if t in stops:
                return ids[: k + 1], {"type": "stop", "matched": t}
        return ids[:cap], {"type": "length", "length": cap}

    def _spec_meta(self, num_ids: int, seed: int) -> dict:
        """EAGLE counters for an output of `num_ids` tokens: verify steps after the prefill
        token, each accepting a deterministic 0..K drafts plus the bonus token."""
        rng = random.Random(seed)
        produced, steps, correct = 1, 0, 0
        while produced < num_ids:
            accepted = min(rng.randint(0, self.spec_steps), num_ids - produced - 1)
            produced += accepted + 1
            correct += accepted
            steps += 1
        return {
            "spec_verify_ct": steps,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": steps * self.spec_steps,
        }

    def _one(
        self, input_ids, params: dict, rid: str, return_logprob: bool, fault: str | None
    ) -> dict:
        start = time.perf_counter()
        if self.short_every and zlib.crc32(orjson.dumps(input_ids)) % self.short_every == 0:
            stop = (list(params.get("stop_token_ids") or []) or [2])[0]
            ids, finish = [stop], {"type": "stop", "matched": stop}  # ends at its first token
        elif self.tokenizer is not None:
            ids, finish = self._vocab_output(input_ids, params)
        elif self.latency.token_s > 0:  # the long-tailed length draw
            ids, finish = fake_output(
                input_ids,
                int(params.get("max_new_tokens", 128)),
                list(params.get("stop_token_ids") or []),
                fixed_len=self.latency.length(input_ids),
            )
        else:
            ids, finish = fake_output(
                input_ids,
                int(params.get("max_new_tokens", 128)),
                list(params.get("stop_token_ids") or []),
                fixed_len=self.fixed_len,
            )
        if fault == "abort":  # aborted before prefill: nothing was generated
            ids, finish = (
                [],
                {
                    "type": "abort",
                    "message": "Abort before prefill",
                    "status_code": None,
                    "err_type": None,
                },
            )
        if fault == "abort400":  # Req.set_finish_with_abort: FINISH_ABORT(msg, 400, ...)
            ids, finish = (
                [],
                {
                    "type": "abort",
                    "message": f"Input length ({len(input_ids)} tokens) exceeds the maximum "
                    "allowed length.",
                    "status_code": 400,
                    "err_type": "BadRequestError",
                },
            )
        meta = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(input_ids),
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "weight_versions": [{"version": "default", "start": 0, "end": len(ids)}],
            "cached_tokens_details": None,
            "dp_rank": None,
            "e2e_latency": time.perf_counter() - start,
            "response_sent_to_client_ts": time.time(),
        }
        if return_logprob:
            meta["input_token_logprobs"] = []
            meta["output_token_logprobs"] = [[-1.0, t, None] for t in ids]
            meta["output_token_logprobs_length"] = len(ids)
        if self.spec_steps and ids:
            spec = self._spec_meta(len(ids), zlib.crc32(orjson.dumps(input_ids)))
            if spec["spec_verify_ct"] > 0:  # SGLang writes none of them otherwise
                meta.update(spec)
        if self.tokenizer is not None:
            skip = params.get("skip_special_tokens", True)
            text = self.tokenizer.decode(ids, skip_special_tokens=skip)
        else:
            text = f" <{len(ids)} fake tokens>"
        return {"text": text, "output_ids": ids, "meta_info": meta}

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if (busy := self._loading()) is not None:
            return busy
        self.num_requests += 1
        fault = self.faults.next()
        if fault in ("500", "503", "429"):
            body = {
                "object": "error",
                "message": f"injected {fault}",
                "type": "Error",
                "param": None,
                "code": int(fault),
            }
            return web.json_response(
                body, status=int(fault), dumps=lambda o: orjson.dumps(o).decode()
            )
        if fault == "hang":
            await asyncio.sleep(self.hang_s)
        if fault == "slow":
            await asyncio.sleep(self.slow_s)
        if fault == "reset":
            request.transport.close()  # connection reset mid-request
            raise ConnectionResetError("injected reset")
        try:
            payload = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response({"error": {"message": "invalid JSON"}}, status=400)
        input_ids = payload.get("input_ids")
        if fault == "400" or not input_ids:
            return web.json_response(
                {"error": {"message": "The input_ids is empty or invalid."}}, status=400
            )
        if fault == "malformed":
            return web.Response(body=b'{"text": "trunc', content_type="application/json")
        params = payload.get("sampling_params") or {}
        rid = payload.get("rid") or uuid.uuid4().hex
        batch = input_ids if isinstance(input_ids[0], list) else [input_ids]
        too_long = next(
            (x for x in batch if self.context_length and len(x) >= self.context_length), None
        )
        if too_long is not None:
            message = (
                f"The input ({len(too_long)} tokens) is longer than the model's context length "
                f"({self.context_length} tokens)."
            )
            return web.json_response({"error": {"message": message}}, status=400)
        await self._serve_slot()
        logprob = bool(payload.get("return_logprob"))
        if isinstance(input_ids[0], list):  # batch form
            plist = params if isinstance(params, list) else [params] * len(input_ids)
            rids = rid if isinstance(rid, list) else [f"{rid}_{i}" for i in range(len(batch))]
            out = [
                self._one(ids, p, r, logprob, fault) for ids, p, r in zip(input_ids, plist, rids)
            ]
        else:
            out = self._one(input_ids, params, rid, logprob, fault)
        if self.latency.token_s > 0:  # answered when the longest member is done
            items = out if isinstance(out, list) else [out]
            await self.latency.decode([len(o["output_ids"]) for o in items])
        return web.Response(body=orjson.dumps(out), content_type="application/json")

    async def _serve_slot(self) -> None:
        """With `--capacity`, wait for a free slot and hold it for `--service-s`."""
        if self.capacity is None:
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.capacity)
        self.num_waiting += 1
        async with self._slots:
            self.num_waiting -= 1
            self.num_running += 1
            try:
                await asyncio.sleep(self.service_s)
            finally:
                self.num_running -= 1

    async def fake_stats(self, request: web.Request) -> web.Response:
        """The latency model's counters (not an SGLang endpoint)."""
        return web.json_response({"requests": self.num_requests, **self.latency.stats()})

    async def health(self, request: web.Request) -> web.Response:
        return self._loading() or web.Response(status=200)

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.model_path,
                "tokenizer_path": self.model_path,
                "context_length": self.context_length,
                "skip_tokenizer_init": False,
                "speculative_algorithm": "EAGLE3" if self.spec_steps else None,
                "speculative_num_steps": self.spec_steps or None,
                "max_total_num_tokens": 65536,
                "max_req_input_len": (self.context_length or 65536) - 1,
                "internal_states": [
                    {
                        "last_gen_throughput": 0.0,
                        "num_running_reqs": self.num_running,
                        "num_queue_reqs": self.num_waiting,
                    }
                ],
                "version": "0.5.23-fake",
            }
        )

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.model_path,
                "tokenizer_path": self.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "has_image_understanding": False,
                "has_audio_understanding": False,
            }
        )

    async def chat(self, request: web.Request) -> web.Response:
        """An OpenAI chat endpoint (text only) in vLLM's response shape, for comparing
        text-based regeneration tools (speculators' `regenerate-responses`). With
        `return_token_ids` it adds vLLM's top-level `prompt_token_ids` and per-choice
        `token_ids`. The "rendering" is a cheap stand-in (words `wN` are token N), so the
        fake server stays fast enough that the client is what gets measured."""
        payload = orjson.loads(await request.read())
        prompt_ids = chat_prompt_ids(payload.get("messages") or [])
        ids, finish = fake_output(
            prompt_ids, int(payload.get("max_tokens") or 16), [2], fixed_len=self.fixed_len
        )
        stopped = finish["type"] == "stop"
        want_ids = bool(payload.get("return_token_ids"))
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": payload.get("model") or "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": " ".join(f"w{t}" for t in ids if t != 2),
                        "reasoning_content": None,
                        "tool_calls": [],
                    },
                    "logprobs": None,
                    "finish_reason": "stop" if stopped else "length",
                    "stop_reason": None,  # vLLM: null when the stop was EOS
                    "token_ids": ids if want_ids else None,
                }
            ],
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt_ids) + len(ids),
            },
            "prompt_logprobs": None,
            "prompt_token_ids": prompt_ids if want_ids else None,
            "kv_transfer_params": None,
        }
        return web.Response(body=orjson.dumps(body), content_type="application/json")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/generate", self.generate)
        app.router.add_put("/generate", self.generate)
        app.router.add_get("/health", self.health)
        app.router.add_get("/health_generate", self.health)
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_get("/get_server_info", self.server_info)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/fake_stats", self.fake_stats)
        return app


async def serve(app: web.Application) -> int:
    """Listen on a free port (or `--port`), print `PORT <n>`; the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", app["port"])
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return port


async def _serve(args: argparse.Namespace) -> None:
    server = FakeSGLang(
        args.fault_rate,
        parse_faults(args.faults, FAULTS),
        args.seed,
        args.hang_s,
        args.slow_s,
        fixed_len=args.fixed_len,
        tokenizer_dir=args.tokenizer,
        context_length=args.context_length,
        load_s=args.load_s,
        spec_steps=args.spec_steps,
        schedule=parse_faults(args.fault_schedule, FAULTS),
        capacity=args.capacity,
        service_s=args.service_s,
        short_every=args.short_every,
        token_s=args.token_s,
        length_median=args.length_median,
        length_sigma=args.length_sigma,
        decode_slots=args.decode_slots,
    )
    app = server.app()
    app["port"] = args.port
    port = await serve(app)
    server.ready_at = time.time() + server.load_s  # "loading" starts now
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--fault-rate", type=float, default=0.0)
    ap.add_argument("--faults", default="")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hang-s", type=float, default=30.0)
    ap.add_argument("--slow-s", type=float, default=0.3)
    ap.add_argument("--fixed-len", type=int, default=None, help="every output this long")
    ap.add_argument("--tokenizer", default=None, help="emit ids of this tokenizer's vocabulary")
    ap.add_argument("--context-length", type=int, default=None)
    ap.add_argument("--load-s", type=float, default=0.0, help="seconds of 503 while loading")
    ap.add_argument("--spec-steps", type=int, default=0, help="report EAGLE counters for K steps")
    ap.add_argument("--fault-schedule", default="", help="faults of the first requests, in order")
    ap.add_argument("--capacity", type=int, default=None, help="requests computed at once")
    ap.add_argument("--service-s", type=float, default=0.0, help="seconds each one takes")
    ap.add_argument(
        "--short-every", type=int, default=0, help="every Nth prompt stops at its first token"
    )
    ap.add_argument("--token-s", type=float, default=0.0, help="latency model: s per token")
    ap.add_argument("--length-median", type=float, default=470.0, help="lognormal median")
    ap.add_argument("--length-sigma", type=float, default=1.2, help="lognormal sigma")
    ap.add_argument("--decode-slots", type=int, default=None, help="sequences decoding at once")
    args = ap.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
