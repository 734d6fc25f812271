"""The async generation orchestrator (docs/architecture.md).

- bounded in-flight requests: `concurrency` per server, least-outstanding routing across URLs;
- retries with exponential backoff and jitter on retryable failures (connection errors,
  timeouts, 408/429/5xx, aborts, malformed bodies), then a permanent `RequestError`;
- results are committed in atomic shards; a stop request (SIGINT) stops dispatch, lets
  in-flight requests finish, flushes, and leaves a run that resumes by id.

Multi-turn `all` regenerates each assistant turn in order, conditioned on the regenerated
history, rendered by the template's own rules (see `multiturn.py`).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from eyas.backends.base import Backend, BackendError, Generation, GenRequest
from eyas.config import RetryConfig
from eyas.generate.jobs import Job
from eyas.records import RequestError, Sample
from eyas.store import ShardWriter


@dataclass
class Stats:
    total: int = 0
    done: int = 0
    samples: int = 0
    failed: int = 0
    retries: int = 0
    output_tokens: int = 0
    reasons: Counter = field(default_factory=Counter)
    retry_reasons: Counter = field(default_factory=Counter)
    finish_reasons: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)

    def as_dict(self) -> dict:
        elapsed = time.perf_counter() - self.started
        return {
            "jobs": self.total,
            "jobs_done": self.done,
            "samples_written": self.samples,
            "failed": self.failed,
            "retries": self.retries,
            "output_tokens": self.output_tokens,
            "failure_reasons": dict(self.reasons),
            "retry_reasons": dict(self.retry_reasons),
            "finish_reasons": dict(self.finish_reasons),
            "seconds": round(elapsed, 3),
        }


class _Server:
    def __init__(self, backend: Backend):
        self.backend = backend
        self.outstanding = 0


class JobFailed(Exception):
    def __init__(self, error: BackendError, attempts: int):
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class Engine:
    def __init__(
        self,
        *,
        backends: list[Backend],
        writer: ShardWriter,
        errors: IO[bytes],
        retry: RetryConfig,
        concurrency: int,
        flush_s: float = 30.0,
        multi_turn: Callable[[Engine, Job], Any] | None = None,
        on_progress: Callable[[Stats], None] | None = None,
    ):
        self.backends = backends
        self.servers = [_Server(b) for b in backends]
        self.writer = writer
        self.errors = errors
        self.retry = retry
        self.concurrency = concurrency
        self.flush_s = flush_s
        self.multi_turn = multi_turn
        self.on_progress = on_progress
        self.stats = Stats()
        self.stop = asyncio.Event()
        self.stopped_reason: str | None = None  # set when the engine stops itself
        self._consecutive_failures = 0
        self._rng = random.Random()

    # -- one request, with retries ------------------------------------------------------------

    async def request(self, req: GenRequest) -> tuple[Generation, int]:
        """Send `req` to the least-loaded server, retrying retryable failures."""
        attempt = 0
        while True:
            attempt += 1
            server = min(self.servers, key=lambda s: s.outstanding)
            server.outstanding += 1
            try:
                return await server.backend.generate(req), attempt
            except BackendError as exc:
                if not exc.retryable or attempt >= self.retry.max_attempts or self.stop.is_set():
                    raise JobFailed(exc, attempt) from exc
                self.stats.retries += 1
                self.stats.retry_reasons[exc.reason] += 1
            finally:
                server.outstanding -= 1
            delay = min(self.retry.max_backoff_s, self.retry.backoff_s * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + self._rng.random()))  # jitter: 0.5x-1.5x

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
        return [self.sample_from(job, req, gen, attempts, self.servers[0].backend.name)]

    def record_error(self, error: RequestError) -> None:
        self.errors.write(orjson.dumps(error.to_dict()) + b"\n")
        self.errors.flush()
        self.stats.reasons[error.reason] += 1

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
            try:
                if job.multi_turn == "all" and self.multi_turn is not None:
                    samples = await self.multi_turn(self, job)
                else:
                    samples = await self._single(job)
            except JobFailed as exc:
                self.stats.failed += 1
                self.record_error(
                    RequestError(
                        job.id, exc.error.reason, exc.error.detail, exc.attempts, job.dataset
                    )
                )
                self._note_failure(exc.error)
            else:
                self._consecutive_failures = 0
                self.commit(samples)
            self.stats.done += 1
            if self.on_progress:
                self.on_progress(self.stats)

    def _note_failure(self, error: BackendError) -> None:
        """Circuit breaker: a permanent answer (400) means the server is alive; a run of jobs
        that exhausted their retries on transport/5xx/timeout errors means it is not."""
        if not error.retryable:
            self._consecutive_failures = 0
            return
        self._consecutive_failures += 1
        limit = self.retry.max_consecutive_failures
        if limit and self._consecutive_failures >= limit and not self.stop.is_set():
            self.stopped_reason = (
                f"servers_failing: {self._consecutive_failures} jobs in a row failed after "
                f"{self.retry.max_attempts} attempts (last: {error.reason})"
            )
            self.stop.set()  # in-flight jobs finish; undispatched ones stay for the resume

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.flush_s)
            self.writer.flush()

    async def run(self, jobs: list[Job]) -> Stats:
        self.stats.total = len(jobs)
        shared = iter(jobs)
        capacity = self.concurrency * len(self.servers)
        workers = [
            asyncio.create_task(self._worker(shared)) for _ in range(min(capacity, len(jobs)))
        ]
        flusher = asyncio.create_task(self._flusher())
        try:
            await asyncio.gather(*workers)
        finally:
            flusher.cancel()
            for w in workers:
                w.cancel()
            self.writer.flush()
        return self.stats
