"""Streaming capture: `eyas train --capture-ahead N` captures each global batch's target states
through the engine while training runs, at most N batches ahead, into `OUT/spool/` (one shard
per batch); the trainer reads a batch's shard when it trains it and deletes it after the step.
Disk use stays at about N batches of states, for runs too large to store a full capture.

The spool shard of batch position p is `batch-PPPPPPPP.safetensors`, committed by rename, so a
killed run resumes at its checkpoint's position and reuses or recaptures what it needs.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from eyas.store.captures import CapturedRow, CaptureWriter, read_shard_rows
from eyas.train.data import Sequence


def spool_name(position: int) -> str:
    return f"batch-{position:08d}.safetensors"


class CaptureStream:
    def __init__(
        self,
        spool: Path,
        batch_at: Callable[[int], list[Sequence]],
        make_backend: Callable[[], object],
        ahead: int,
        end: int,
        dtype: torch.dtype = torch.bfloat16,
        log: Callable[[str], None] = print,
    ):
        self.spool = spool
        self.batch_at = batch_at  # the global batch (every rank's sequences) at a position
        self.make_backend = make_backend
        self.ahead = ahead
        self.end = end  # positions the run will train: nothing past it is captured
        self.dtype = dtype
        self.log = log
        self.consumed = 0
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

    async def _produce_async(self, position: int) -> None:
        backend = self.make_backend()
        await backend.ready(600.0)
        while True:
            with self._cv:
                while not self._stop and position >= self.consumed + self.ahead:
                    self._cv.wait(0.5)
                if self._stop or position >= self.end:
                    return
            path = self.spool / spool_name(position)
            if not path.exists():
                writer = CaptureWriter(self.spool, 1 << 30, self.dtype)
                for seq in self.batch_at(position):
                    states = await backend.capture(seq.id, seq.ids)
                    writer.add(seq.id, seq.dataset, states, seq.ids, seq.supervised)
                writer.flush(spool_name(position))
            with self._cv:
                self.peak_shards = max(self.peak_shards, len(list(self.spool.glob("batch-*"))))
                self._cv.notify_all()
            position += 1

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
