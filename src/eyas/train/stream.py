"""Streaming capture: `eyas train --capture-ahead N` captures target states through the engine
while training runs. Every rank captures its own share of each global batch (the same
token-balanced share it trains, from the batch plan) into a spool of its own,
`OUT/spool/rank-R/` (`OUT/spool/` for one process): one shard per micro-batch, at most N
batches ahead and, with a byte cap, at most that many bytes. A rank reads only its own spool,
so the spool may sit on the rank's local disk.

The producer overlaps its work: up to N batches are captured at once (their requests in
flight together), each batch's shard is written on a worker thread while later batches are
still being captured, and training reads earlier shards meanwhile. A trained batch's shard is
deleted after its step; the producer waits while the spool is full.

A producer that fails records its reason; the trainer raises it at the next step, and every
rank learns of it there through a one-element-per-rank all-reduce of a status flag, so all
ranks stop within a step with the snake_case reason `capture_failed` (no rank waits for a
shard that will never come).

The shard of batch position p is `batch-PPPPPPPP.safetensors`, committed by rename, so a
killed run resumes at its checkpoint's position and reuses or recaptures what it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import torch

from eyas.backends.policy import RequestFailed, ServerPool
from eyas.errors import EyasError
from eyas.records import RequestError
from eyas.store.captures import CapturedRow, CaptureWriter, read_shard_rows
from eyas.train.data import Sequence


def spool_name(position: int) -> str:
    return f"batch-{position:08d}.safetensors"


class CaptureStream:
    """`open_pool()` opens the capture engine's `ServerPool` (the one client policy: every
    capture URL, retries, progress-aware timeouts, the breaker); it is opened and closed in the
    producer thread. A request that fails for good stops the stream: its reason goes to
    `errors.jsonl` in the spool and the trainer raises it (a batch cannot train without its
    rows); the client's figures go to `client.json`."""

    def __init__(
        self,
        spool: Path,
        batch_at: Callable[[int], list[Sequence]],
        open_pool: Callable[[], contextlib.AbstractAsyncContextManager[ServerPool]],
        ahead: int,
        end: int,
        dtype: torch.dtype = torch.bfloat16,
        log: Callable[[str], None] = print,
        max_bytes: int | None = None,
    ):
        self.spool = spool
        self.batch_at = batch_at  # this rank's sequences of the batch at a position
        self.open_pool = open_pool
        self.ahead = ahead
        self.end = end  # positions the run will train: nothing past it is captured
        self.dtype = dtype
        self.log = log
        self.max_bytes = max_bytes  # spool cap in bytes (the next batch is always allowed)
        self.consumed = 0
        self.client: dict[str, Any] = {}
        self._cv = threading.Condition()
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self._bytes: dict[int, int] = {}  # committed shard sizes, by position
        self._sizes: list[int] = []  # every committed shard's size (the in-flight estimate)
        self._inflight = 0
        self.peak_shards = 0
        self.wait_s = 0.0  # time the trainer waited for shards (the stream not keeping up)

    # -- producer (a thread with its own event loop) ----------------------------------------

    def start(self, position: int) -> None:
        self.spool.mkdir(parents=True, exist_ok=True)
        for stale in self.spool.glob("batch-*.safetensors"):
            if int(stale.stem.split("-")[1]) < position:
                stale.unlink()
        self.consumed = position
        self._thread = threading.Thread(target=self._produce, args=(position,), daemon=True)
        self._thread.start()

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            if self._error is None:
                self._error = exc
            self._cv.notify_all()

    def _produce(self, position: int) -> None:
        try:
            asyncio.run(self._produce_async(position))
        except BaseException as exc:
            self._fail(exc)

    def _wait_for_room(self, position: int) -> bool:
        """Block until `position` may be captured; False when the stream should end."""
        with self._cv:
            while not self._stop and self._error is None and not self._room(position):
                self._cv.wait(0.5)
            return not self._stop and self._error is None and position < self.end

    def _room(self, position: int) -> bool:
        if position >= self.consumed + self.ahead:
            return False
        if self.max_bytes is None or position == self.consumed:
            return True
        # batches in flight count at the mean committed size (unknown before the first)
        sizes = self._sizes or [self.max_bytes]
        held = sum(self._bytes.values()) + self._inflight * sum(sizes) / len(sizes)
        return held < self.max_bytes

    async def _produce_async(self, position: int) -> None:
        async with self.open_pool() as pool:
            tasks: set[asyncio.Task] = set()
            try:
                while await asyncio.to_thread(self._wait_for_room, position):
                    if not (self.spool / spool_name(position)).exists():
                        with self._cv:
                            self._inflight += 1
                        task = asyncio.create_task(self._capture_batch(pool, position))
                        task.add_done_callback(self._finished)
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
                    else:
                        self._committed(position)
                    position += 1
                    await asyncio.sleep(0)  # let the new batch's requests go out
                if tasks and self._error is None and not self._stop:  # the run trains them
                    await asyncio.wait(tasks)
            finally:
                for task in tasks:
                    task.cancel()
                self.client = pool.describe()
                (self.spool / "client.json").write_bytes(orjson.dumps(self.client))

    def _finished(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._fail(task.exception())

    def _committed(self, position: int, size: int | None = None) -> None:
        """A shard is there: `size` when this producer wrote it (the trainer may have read
        and deleted it already), else one found on resume."""
        captured = size is not None
        if size is None:
            with contextlib.suppress(FileNotFoundError):
                size = (self.spool / spool_name(position)).stat().st_size
        with self._cv:
            size = size or 0
            if captured:
                self._inflight -= 1
                self._sizes = [*self._sizes[-15:], size]
            if position >= self.consumed:
                self._bytes[position] = size
            self.peak_shards = max(self.peak_shards, len(list(self.spool.glob("batch-*"))))
            self._cv.notify_all()

    async def _capture_batch(self, pool: ServerPool, position: int) -> None:
        seqs = self.batch_at(position)

        async def one(seq: Sequence):
            states, _ = await pool.call(
                lambda b: b.capture(seq.id, seq.ids), work=lambda _: len(seq.ids)
            )
            return states

        results = await asyncio.gather(*(one(s) for s in seqs), return_exceptions=True)
        failed = [(s, r) for s, r in zip(seqs, results) if isinstance(r, RequestFailed)]
        if failed:
            with (self.spool / "errors.jsonl").open("ab") as f:
                for seq, exc in failed:
                    error = RequestError(
                        seq.id, exc.error.reason, exc.error.detail, exc.attempts, seq.dataset
                    )
                    f.write(orjson.dumps(error.to_dict()) + b"\n")
            seq, exc = failed[0]
            raise EyasError(
                "capture_failed",
                f"streamed capture of batch {position} failed: sample {seq.id}: "
                f"{exc.error.reason}: {exc.error.detail} ({len(failed)} failed, see "
                f"{self.spool / 'errors.jsonl'}); the run resumes from its last checkpoint",
            )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        # the write runs on a worker thread: later batches keep capturing meanwhile
        size = await asyncio.to_thread(self._write, seqs, results, position)
        self._committed(position, size)

    def _write(self, seqs: list[Sequence], results: list, position: int) -> int:
        writer = CaptureWriter(self.spool, 1 << 30, self.dtype)
        for seq, states in zip(seqs, results):
            writer.add(seq.id, seq.dataset, states, seq.ids, seq.supervised)
        writer.flush(spool_name(position))
        return sum(int(s.numel()) * self.dtype.itemsize for s in results)  # the shard's bulk

    # -- consumer ----------------------------------------------------------------------------

    def error(self) -> EyasError | None:
        """The producer's failure, as a snake_case reason, or None."""
        exc = self._error
        if exc is None or isinstance(exc, EyasError):
            return exc
        return EyasError("capture_failed", f"streamed capture failed: {type(exc).__name__}: {exc}")

    def wait(self, positions: list[int], timeout_s: float = 3600.0) -> EyasError | None:
        """Wait until the shards of `positions` are committed; the producer's failure if it
        failed first (returned, not raised, so the caller can tell the other ranks)."""
        deadline = time.time() + timeout_s
        start = time.perf_counter()
        paths = [self.spool / spool_name(p) for p in positions]
        with self._cv:
            while not all(p.exists() for p in paths):
                if self._error is not None:
                    return self.error()
                if time.time() > deadline:
                    return EyasError(
                        "capture_timeout",
                        f"no streamed capture of batches {positions} after {timeout_s:.0f}s",
                    )
                self._cv.wait(0.5)
        self.wait_s += time.perf_counter() - start
        return None

    def rows(self, position: int, timeout_s: float = 3600.0) -> dict[str, CapturedRow]:
        """The captured rows of batch `position`, by sample id (waits for the producer)."""
        error = self.wait([position], timeout_s)
        if error is not None:
            raise error
        return {row.id: row for row in read_shard_rows(self.spool / spool_name(position))}

    def done(self, position: int) -> None:
        """Batch `position` is trained: delete its shard and let the producer move on."""
        (self.spool / spool_name(position)).unlink(missing_ok=True)
        with self._cv:
            self._bytes.pop(position, None)
            self.consumed = max(self.consumed, position + 1)
            self._cv.notify_all()

    def stop(self, finished: bool = False) -> None:
        """Stop the producer; a finished run also clears the spool."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=60)
        if finished:
            for leftover in self.spool.glob("batch-*.safetensors"):
                leftover.unlink()
