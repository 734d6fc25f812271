"""The async generation orchestrator (docs/architecture.md).

Requests go through the one client policy (`eyas.backends.policy.ServerPool`): bounded and
adaptive in-flight limits per server, least-outstanding routing, progress-aware timeouts,
retries by reason code, the circuit breaker. This module turns jobs into requests and
samples:

- results are committed in atomic shards; a stop request (SIGINT, or the pool's breaker)
  stops dispatch, lets in-flight requests finish, flushes, and leaves a run that resumes by id;
- a request that failed permanently or ran out of attempts becomes a `RequestError`.

Multi-turn `all` regenerates each assistant turn in order, conditioned on the regenerated
history, rendered by the template's own rules (see `multiturn.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import IO, Any

from eyas.backends.base import Generation, GenRequest
from eyas.backends.policy import RequestFailed, ServerPool
from eyas.generate.jobs import Job
from eyas.jobs import ErrorLog, Stats
from eyas.records import RequestError, Sample
from eyas.store import ShardWriter


class Engine:
    def __init__(
        self,
        *,
        pool: ServerPool,
        writer: ShardWriter,
        errors: IO[bytes],
        flush_s: float = 30.0,
        multi_turn: Callable[[Engine, Job], Any] | None = None,
        on_progress: Callable[[Stats], None] | None = None,
        done_elsewhere: Callable[[], set[str]] | None = None,
    ):
        self.pool = pool
        self.writer = writer
        self.flush_s = flush_s
        self.multi_turn = multi_turn
        self.on_progress = on_progress
        self.stats = Stats()
        self.errors = ErrorLog(errors, self.stats)
        self.stop = pool.stop  # SIGINT and the pool's breaker stop the same run
        # ids other jobs of the same folder committed since this one started (re-read at
        # every flush), skipped instead of generated twice
        self.done_elsewhere = done_elsewhere
        self._elsewhere: set[str] = set()
        self._workers: list[asyncio.Task] = []  # filled by the pool as workers start

    def cancel(self) -> None:
        """Abandon the requests in flight (they are retried by the next run); what is
        committed stays, and `run` still flushes the buffer."""
        self.stop.set()
        for task in self._workers:
            task.cancel()

    @property
    def backend_name(self) -> str:
        return self.pool.name

    # -- one request, with retries ------------------------------------------------------------

    async def request(self, req: GenRequest) -> tuple[Generation, int]:
        """(generation, attempts) under the client policy; RequestFailed when it gives up."""
        try:
            return await self.pool.call(
                lambda b: b.generate(req), work=lambda gen: len(gen.output_ids)
            )
        finally:
            self.stats.retries = self.pool.retries
            self.stats.retry_reasons = self.pool.retry_reasons

    # -- jobs -----------------------------------------------------------------------------------

    def sample_from(
        self,
        job: Job,
        req: GenRequest,
        gen: Generation,
        attempts: int,
        backend: str,
        **overrides: Any,
    ) -> Sample:
        sample = Sample(
            id=job.id,
            dataset=job.dataset,
            prompt_ids=req.prompt_ids,
            output_ids=gen.output_ids,
            finish_reason=gen.finish_reason,
            matched_stop=gen.matched_stop,
            messages=job.messages,
            tools=job.tools,
            backend=backend,
            sampling={**job.sampling, "max_new_tokens": req.max_new_tokens},
            attempts=attempts,
            latency_s=round(float(gen.meta.get("latency_s", 0.0)), 4),
            turn=job.turn,
        )
        for key, value in overrides.items():
            setattr(sample, key, value)
        return sample

    async def _single(self, job: Job) -> list[Sample]:
        req = GenRequest(
            id=job.id,
            prompt_ids=job.prompt_ids,
            max_new_tokens=job.max_new_tokens,
            sampling=job.sampling,
            messages=job.messages[: job.turn] if job.turn >= 0 else job.messages,
            tools=job.tools,
        )
        gen, attempts = await self.request(req)
        return [self.sample_from(job, req, gen, attempts, self.backend_name)]

    def record_error(self, error: RequestError) -> None:
        self.errors.add(error)

    def commit(self, samples: list[Sample]) -> None:
        # All samples of one conversation land in one shard, so resume sees all or none.
        self.writer.add_group(samples)
        for s in samples:
            self.stats.samples += 1
            self.stats.output_tokens += len(s.output_ids)
            self.stats.finish_reasons[s.finish_reason] += 1

    async def _worker(self, jobs: Iterable[Job]) -> None:
        for job in jobs:  # a shared iterator: each job goes to exactly one worker
            if self.stop.is_set():
                return
            if job.id in self._elsewhere:
                self.stats.skipped_elsewhere += 1
                self.stats.done += 1
                continue
            try:
                if job.multi_turn == "all" and self.multi_turn is not None:
                    samples = await self.multi_turn(self, job)
                else:
                    samples = await self._single(job)
            except RequestFailed as exc:
                self.stats.failed += 1
                self.record_error(
                    RequestError(
                        job.id, exc.error.reason, exc.error.detail, exc.attempts, job.dataset
                    )
                )
            else:
                self.commit(samples)
            self.stats.done += 1
            if self.on_progress:
                self.on_progress(self.stats)

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            self.writer.flush()
            if self.done_elsewhere is not None:
                self._elsewhere |= await asyncio.to_thread(self.done_elsewhere)

    async def run(self, jobs: list[Job]) -> Stats:
        self.stats.total = len(jobs)
        shared = iter(jobs)
        # enough workers to fill every server's ceiling (more as servers join from a url
        # file); the pool holds them to its limits, and a worker `cancel` ends has returned
        flusher = asyncio.create_task(self._flusher())
        try:
            await self.pool.fill(lambda: self._worker(shared), len(jobs), self._workers)
        finally:
            flusher.cancel()
            self.writer.flush()
        return self.stats
