"""Streaming capture: `eyas train --capture-ahead N` captures each global batch's target states
through the engine while training runs, at most N batches ahead, into `OUT/spool/` (one shard
per batch); the trainer reads a batch's shard when it trains it and deletes it after the step.
Disk use stays at about N batches of states, for runs too large to store a full capture.

The spool shard of batch position p is `batch-PPPPPPPP.safetensors`, committed by rename, so a
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
    `spool/errors.jsonl` and the trainer raises it (a batch cannot train without its rows);
    the client's figures go to `spool/client.json`."""

    def __init__(
        self,
        spool: Path,
        batch_at: Callable[[int], list[Sequence]],
        open_pool: Callable[[], contextlib.AbstractAsyncContextManager[ServerPool]],
        ahead: int,
        end: int,
        dtype: torch.dtype = torch.bfloat16,
        log: Callable[[str], None] = print,
    ):
        self.spool = spool
        self.batch_at = batch_at  # the global batch (every rank's sequences) at a position
        self.open_pool = open_pool
        self.ahead = ahead
        self.end = end  # positions the run will train: nothing past it is captured
        self.dtype = dtype
        self.log = log
        self.consumed = 0
        self.client: dict[str, Any] = {}
        self._cv = threading.Condition()
        self._error: BaseException | None = None
        self._stop = False
        self._thread: threading.Thread | None = None
        self.peak_shards = 0

    # -- producer (a thread with its own event loop) ----------------------------------------

    def start(self, position: int) -> None:
        self.spool.mkdir(parents=True, exist_ok=True)
        for stale in self.spool.glob("batch-*.safetensors"):
            if int(stale.stem.split("-")[1]) < position:
                stale.unlink()
        self.consumed = position
        self._thread = threading.Thread(target=self._produce, args=(position,), daemon=True)
        self._thread.start()

    def _produce(self, position: int) -> None:
        try:
            asyncio.run(self._produce_async(position))
        except BaseException as exc:
            with self._cv:
                self._error = exc
                self._cv.notify_all()

    def _wait_for_room(self, position: int) -> bool:
        """Block until `position` may be captured; False when the stream should end."""
        with self._cv:
            while not self._stop and position >= self.consumed + self.ahead:
                self._cv.wait(0.5)
            return not self._stop and position < self.end

    async def _produce_async(self, position: int) -> None:
        async with self.open_pool() as pool:
            try:
                while await asyncio.to_thread(self._wait_for_room, position):
                    path = self.spool / spool_name(position)
                    if not path.exists():
                        await self._capture_batch(pool, position)
                    with self._cv:
                        self.peak_shards = max(
                            self.peak_shards, len(list(self.spool.glob("batch-*")))
                        )
                        self._cv.notify_all()
                    position += 1
            finally:
                self.client = pool.describe()
                (self.spool / "client.json").write_bytes(orjson.dumps(self.client))

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
        writer = CaptureWriter(self.spool, 1 << 30, self.dtype)
        for seq, states in zip(seqs, results):
            writer.add(seq.id, seq.dataset, states, seq.ids, seq.supervised)
        writer.flush(spool_name(position))

    # -- consumer ----------------------------------------------------------------------------

    def rows(self, position: int, timeout_s: float = 3600.0) -> dict[str, CapturedRow]:
        """The captured rows of batch `position`, by sample id (waits for the producer)."""
        path = self.spool / spool_name(position)
        deadline = time.time() + timeout_s
        with self._cv:
            while not path.exists():
                if self._error is not None:
                    raise self._error
                if time.time() > deadline:
                    raise TimeoutError(f"no capture of batch {position} after {timeout_s:.0f}s")
                self._cv.wait(0.5)
        return {row.id: row for row in read_shard_rows(path)}

    def done(self, position: int) -> None:
        """Batch `position` is trained: delete its shard and let the producer move on."""
        (self.spool / spool_name(position)).unlink(missing_ok=True)
        with self._cv:
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
