"""The one client policy: how every stage talks to its engine's servers.

Generate, capture, streamed capture in training and served evaluation all send their requests
through a `ServerPool`:

- **bounded in flight per server**, with **least-outstanding routing** over every URL given;
- a **readiness wait** before the first request;
- **retries** with exponential backoff and jitter (0.5x-1.5x) for transient reasons, none for
  permanent ones: the classification is the table in `eyas.backends.reasons`;
- a **progress-aware timeout**: a request is abandoned (reason `timeout`) only when its server
  has shown no progress for `timeout_s`. A request that waits in the server's queue, or is
  simply long, is never cancelled and resubmitted while the server works: the server's own
  progress (its token counters, or a health check that itself proves scheduler work, see each
  backend's `progress()`) and every answer it returns keep the request alive. A dead or frozen
  server answers nothing, so its hung connections time out and are retried;
- an **adaptive in-flight limit** per server: it starts low and doubles while the measured
  throughput (output tokens, or requests, per second) rises by more than `GAIN`, settles at the
  smallest limit that reached the best throughput, re-probes above it every few windows, and
  halves when the server reports overload (429, 5xx). The user's `concurrency` is the ceiling;
- a **circuit breaker**: after `max_consecutive_failures` requests in a row exhausted their
  retries on transient reasons, the pool stops (`stopped_reason`) and the stage ends resumably.

Servers come and go (docs/cluster-servers.md):

- **readiness**: every server's readiness check runs at once; the run starts as soon as one
  server answers, and the others join when they answer (they are probed for the whole run).
  Only when none answers within `ready_timeout_s` does the pool refuse (`server_not_ready`);
- **a server that dies** (`DOWN_AFTER` connection failures in a row) while another serves is
  taken out of routing: its requests are retried on the others, and it is probed back in by
  its readiness check, not by requests. The last server standing is cooled off instead and
  retried by requests, so the breaker still ends a run whose every server is gone;
- **the server list can grow**: `url_file` (one URL per line) is re-read every `url_file_s`
  while the run lasts; each new URL joins like a late server, and `fill()` adds workers to
  use its in-flight ceiling.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from eyas.backends.base import Backend, Progress
from eyas.backends.reasons import BackendError

if TYPE_CHECKING:
    from eyas.backends.server_config import ServerConfig

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class ClientPolicy:
    concurrency: int  # the most requests in flight per server
    adaptive: bool = True  # grow and shrink the limit with the measured throughput
    timeout_s: float = 600.0  # seconds without any progress from the server
    max_attempts: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    max_consecutive_failures: int = 64  # 0: never stop
    ready_timeout_s: float = 600.0

    @property
    def probe_s(self) -> float:
        """How often a busy server's progress is read."""
        return min(5.0, max(0.05, self.timeout_s / 10))

    @classmethod
    def from_config(
        cls, server: ServerConfig, *, concurrency: int, adaptive: bool = True
    ) -> ClientPolicy:
        """From an `eyas.backends.server_config.ServerConfig`: its settings, with `concurrency` when it sets
        none; `adaptive=False` (an in-process engine) turns the adaptive limit off."""
        retry = server.retry
        return cls(
            concurrency=server.concurrency or concurrency,
            adaptive=server.adaptive_concurrency and adaptive,
            timeout_s=server.timeout_s,
            ready_timeout_s=server.ready_timeout_s,
            max_attempts=retry.max_attempts,
            backoff_s=retry.backoff_s,
            max_backoff_s=retry.max_backoff_s,
            max_consecutive_failures=retry.max_consecutive_failures,
        )


class RequestFailed(Exception):
    """A request that failed permanently or ran out of attempts."""

    def __init__(self, error: BackendError, attempts: int):
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class AdaptiveLimit:
    """The in-flight limit of one server, following the throughput it sustains.

    The limit is measured in windows: a window opens when the server first holds `value`
    requests; the next `value` completions are a warm-up (requests sent before the change
    finish early and would overstate the rate), then max(MIN_WINDOW, 2 x value) completions
    give one throughput figure for that limit. Growing: double while a window beats the best so far by GAIN; otherwise settle at
    the best limit. Holding: every HOLD_WINDOWS windows try 1.5x the best, keeping it only if
    it beats the current throughput by GAIN. Overload answers halve the limit and restart.
    """

    GAIN = 1.15
    HOLD_WINDOWS = 4
    START = 4
    MIN_WINDOW = 16

    def __init__(self, maximum: int, adaptive: bool):
        self.maximum = maximum
        self.adaptive = adaptive
        self.value = min(maximum, self.START) if adaptive else maximum
        self.best_rate: float | None = None
        self.best_limit = self.value
        self.growing = True
        self.holds = 0
        self.history: list[dict[str, float]] = []  # one entry per closed window
        self._start: float | None = None
        self._warmup = 0
        self._work = 0.0
        self._count = 0

    def saturated(self, now: float) -> None:
        """The server holds `value` requests: a measurement window may open."""
        if self.adaptive and self._start is None:
            self._start, self._warmup, self._work, self._count = now, self.value, 0.0, 0

    def completed(self, work: float, now: float) -> bool:
        """Count one completion; True when the limit changed."""
        if self._start is None:
            return False
        if self._warmup:
            self._warmup -= 1
            self._start = now
            return False
        self._work += work
        self._count += 1
        if self._count < max(self.MIN_WINDOW, 2 * self.value) or now <= self._start:
            return False
        return self._close(self._work / (now - self._start))

    def overloaded(self) -> bool:
        if not self.adaptive:
            return False
        self.value = max(1, self.value // 2)
        self.best_rate, self.best_limit, self.growing, self._start = None, self.value, True, None
        return True

    def _set(self, value: int) -> bool:
        changed = value != self.value
        self.value = value
        return changed

    def _close(self, rate: float) -> bool:
        self.history.append({"limit": self.value, "rate": round(rate, 3)})
        self._start = None
        if self.growing:
            if self.best_rate is None or rate > self.best_rate * self.GAIN:
                self.best_rate, self.best_limit = rate, self.value
                if self.value < self.maximum:
                    return self._set(min(self.maximum, self.value * 2))
                self.growing, self.holds = False, 0
                return False
            self.growing, self.holds = False, 0
            return self._set(self.best_limit)
        # holding at best_limit: follow the server as it is now, and now and then look higher
        self.best_rate = rate
        self.holds += 1
        if self.holds >= self.HOLD_WINDOWS and self.best_limit < self.maximum:
            self.growing = True
            return self._set(min(self.maximum, math.ceil(self.best_limit * 1.5)))
        return False


class _Server:
    DOWN_AFTER = 3  # connection failures in a row before a cool-off

    def __init__(self, backend: Backend, policy: ClientPolicy):
        self.backend = backend
        self.limit = AdaptiveLimit(policy.concurrency, policy.adaptive)
        self.outstanding = 0
        self.last_evidence = -math.inf  # loop time the server last showed progress
        self.last_work: float | None = None
        self.probes = 0
        self.progress_source = "none"
        self.has_progress_view = True
        self.probe: asyncio.Future | None = None
        self.connection_failures = 0
        self.down_until = 0.0
        self.cooloffs = 0
        self.monitor: asyncio.Task | None = None
        self.joined = False  # answered its readiness check; only joined servers are routed
        self.joiner: asyncio.Task | None = None  # the readiness probe while not joined
        self.joined_after_s: float | None = None  # since the pool started, first join
        self.rejoins = 0  # taken out after dying, then probed back in
        self.not_ready: str | None = None  # the last readiness failure
        self.not_ready_reasons: Counter = Counter()  # readiness failures by reason
        self.source = "url"  # url | url_file
        self.requests = 0  # requests this server answered

    def describe(self) -> dict[str, Any]:
        return {
            "url": self.backend.url,
            "source": self.source,
            "joined": self.joined,
            "joined_after_s": self.joined_after_s,
            "rejoins": self.rejoins,
            "not_ready": None if self.joined else self.not_ready,
            "not_ready_reasons": dict(self.not_ready_reasons),
            "requests": self.requests,
            "limit": self.limit.value,
            "limit_max": self.limit.maximum,
            "adaptive": self.limit.adaptive,
            "limit_history": self.limit.history,
            "progress_source": self.progress_source,
            "progress_probes": self.probes,
        }


class ServerPool:
    """The servers of one engine behind the client policy (see the module docstring)."""

    JOIN_RETRY_S = 1.0  # pause between readiness checks of a server that is not up

    def __init__(
        self,
        backends: list[Backend],
        policy: ClientPolicy,
        *,
        new_backend: Callable[[str], Backend] | None = None,
        url_file: Path | None = None,
        url_file_s: float = 5.0,
    ):
        if not backends and url_file is None:
            raise ValueError("a pool needs at least one backend (or a url file)")
        if url_file is not None and new_backend is None:
            raise ValueError("a url file needs new_backend to build its servers")
        self.backends = list(backends)
        self.policy = policy
        self.servers = [_Server(b, policy) for b in self.backends]
        for s in self.servers:  # routed at once when used without ready() (tests, tools)
            s.joined = True
        self.new_backend = new_backend
        self.url_file = url_file
        self.url_file_s = url_file_s
        self.url_file_reasons: Counter = Counter()  # lines of the url file that were refused
        self.name = backends[0].name if backends else "?"
        self.lossy = any(b.lossy for b in backends)
        self.stop = asyncio.Event()
        self.stopped_reason: str | None = None
        self.retries = 0
        self.retry_reasons: Counter = Counter()
        self.failure_reasons: Counter = Counter()
        self.completed = 0
        self.info: list[dict[str, Any]] = []  # each server's answer to ready()
        self._consecutive_failures = 0
        self._waiters: dict[bool, deque[asyncio.Future]] = {True: deque(), False: deque()}
        self._rng = random.Random()
        self._started = time.monotonic()
        self._any_joined: asyncio.Event | None = None
        self._grew: asyncio.Event | None = None
        self._watcher: asyncio.Task | None = None

    @classmethod
    def from_config(
        cls,
        server: ServerConfig,
        backends: list[Backend],
        *,
        concurrency: int,
        adaptive: bool = True,
        new_backend: Callable[[str], Backend] | None = None,
    ) -> ServerPool:
        """The pool an `eyas.backends.server_config.ServerConfig` describes (the one way every command builds
        its pool; see `ClientPolicy.from_config` for `concurrency` and `adaptive`)."""
        return cls(
            backends,
            ClientPolicy.from_config(server, concurrency=concurrency, adaptive=adaptive),
            new_backend=new_backend,
            url_file=server.url_file,
            url_file_s=server.url_file_s,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def ready(self) -> list[dict[str, Any]]:
        """Start every server's readiness check (and the url file's watch) and return as soon
        as one server serves: the others join when they answer. `info` grows as they do.
        BackendError `server_not_ready` if none answers within ready_timeout_s."""
        self._started = time.monotonic()
        self._any_joined, self._grew = asyncio.Event(), asyncio.Event()
        for s in self.servers:
            self._start_join(s)
        if self.url_file is not None:
            self._read_url_file()
            self._watcher = asyncio.create_task(self._watch_url_file())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.policy.ready_timeout_s, 0.5)
        while not self._any_joined.is_set():
            joiners = [s.joiner for s in self.servers if s.joiner is not None]
            failed = [j for j in joiners if j.done() and not j.cancelled() and j.exception()]
            if failed and len(failed) == len(joiners) and self.url_file is None:
                raise failed[0].exception()  # type: ignore[misc]  # in process: no retrying
            if loop.time() >= deadline:
                break
            joined = asyncio.ensure_future(self._any_joined.wait())
            await asyncio.wait(
                [joined, *(j for j in joiners if not j.done())],
                timeout=deadline - loop.time(),
                return_when="FIRST_COMPLETED",
            )
            joined.cancel()
        if not self._any_joined.is_set():
            tried = [
                f"{s.backend.url} ({s.not_ready or 'no answer'}; "
                f"{sum(s.not_ready_reasons.values())} checks failed)"
                for s in self.servers
            ]
            if self.url_file is not None:
                tried.append(f"url file {self.url_file}: {len(self.servers)} URLs")
            raise BackendError(
                "server_not_ready",
                f"no server answered within {self.policy.ready_timeout_s:g}s: "
                + ("; ".join(tried) or "no URL"),
            ) from None
        return self.info

    @property
    def capacity(self) -> int:
        """The sum of every known server's in-flight ceiling (joined or not)."""
        return sum(s.limit.maximum for s in self.servers)

    async def fill(
        self,
        worker: Callable[[], Awaitable[None]],
        jobs: int,
        tasks: list[asyncio.Task] | None = None,
    ) -> None:
        """Run copies of `worker` (each draws from a shared queue of `jobs`) until all return:
        enough to fill every server's ceiling, and more as servers are added. `tasks`, when
        given, holds the workers as they start (a caller may cancel them: a cancelled worker
        counts as returned)."""
        tasks = [] if tasks is None else tasks

        def top_up() -> None:
            while len(tasks) < max(1, min(jobs, self.capacity)):
                tasks.append(asyncio.create_task(worker()))

        top_up()
        grew = self._grew or asyncio.Event()
        try:
            while pending := [t for t in tasks if not t.done()]:
                grew.clear()
                waiting = asyncio.ensure_future(grew.wait())
                done, _ = await asyncio.wait([*pending, waiting], return_when="FIRST_COMPLETED")
                waiting.cancel()
                for t in done:
                    if t is not waiting and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                top_up()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def add_url(self, url: str, source: str = "url_file") -> bool:
        """A server joins the pool (once per URL): probed until it answers, then routed."""
        url = url.rstrip("/")
        if any(s.backend.url.rstrip("/") == url for s in self.servers):
            return False
        assert self.new_backend is not None
        backend = self.new_backend(url)
        server = _Server(backend, self.policy)
        server.source = source
        self.backends.append(backend)
        self.servers.append(server)
        if self.name == "?":
            self.name, self.lossy = backend.name, backend.lossy
        self._start_join(server)
        if self._grew is not None:
            self._grew.set()
        return True

    def _start_join(self, server: _Server) -> None:
        server.joined = False
        if server.joiner is None or server.joiner.done():
            server.joiner = asyncio.create_task(self._join(server))

    async def _join(self, server: _Server) -> None:
        """Probe a server with its readiness check until it answers, for as long as the
        pool lives, then route requests to it."""
        while True:
            try:
                info = await server.backend.ready(min(max(self.policy.ready_timeout_s, 1), 10))
                break
            except BackendError as exc:
                server.not_ready = f"{exc.reason}: {exc.detail}"
                server.not_ready_reasons[exc.reason] += 1
                if not getattr(server.backend, "remote", True):
                    raise  # an in-process engine that cannot load does not come later
            await asyncio.sleep(self.JOIN_RETRY_S)
        server.joined = True
        server.down_until, server.connection_failures, server.cooloffs = 0.0, 0, 0
        if server.joined_after_s is None:
            server.joined_after_s = round(time.monotonic() - self._started, 3)
            self.info.append(info)
        else:
            server.rejoins += 1
        if self._any_joined is not None:
            self._any_joined.set()
        self._wake(self.capacity)

    def _read_url_file(self) -> None:
        """Add the url file's new URLs (one a line; blank lines and # comments skipped). A
        missing file is an empty list: the job that writes it may not have started yet."""
        assert self.url_file is not None
        try:
            lines = self.url_file.read_text().splitlines()
        except FileNotFoundError:
            return
        except OSError:
            self.url_file_reasons["url_file_unreadable"] += 1
            return
        for line in lines:
            url = line.split("#", 1)[0].strip()
            if not url:
                continue
            if not url.startswith(("http://", "https://")):
                self.url_file_reasons["not_an_http_url"] += 1
                continue
            self.add_url(url)

    async def _watch_url_file(self) -> None:
        while True:
            await asyncio.sleep(self.url_file_s)
            self._read_url_file()

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        for s in self.servers:
            for task in (s.monitor, s.probe):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            if s.joiner is not None:  # its failure, if any, was ready()'s to raise
                s.joiner.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await s.joiner
        for b in self.backends:
            await b.close()

    def describe(self) -> dict[str, Any]:
        return {
            "servers": [s.describe() for s in self.servers],
            "url_file": str(self.url_file) if self.url_file else None,
            "url_file_reasons": dict(self.url_file_reasons),
            "retries": self.retries,
            "retry_reasons": dict(self.retry_reasons),
            "failure_reasons": dict(self.failure_reasons),
            "stopped_reason": self.stopped_reason,
            "timeout_s": self.policy.timeout_s,
            "max_attempts": self.policy.max_attempts,
        }

    # -- one request ----------------------------------------------------------------------------

    async def call(
        self,
        op: Callable[[Backend], Awaitable[T]],
        *,
        work: Callable[[T], float] | None = None,
        on: Backend | None = None,
    ) -> tuple[T, int]:
        """Run `op(backend)` on the least-loaded server under the policy: (result, attempts).
        `work` measures a result for the adaptive limit (default: 1 per request); `on` sends
        every attempt to that one server (a reading of its own state, e.g. its counters)."""
        if self.stop.is_set():
            self.failure_reasons["not_sent"] += 1
            raise RequestFailed(BackendError("not_sent", self.stopped_reason or "stopped"), 0)
        attempt = 0
        last: _Server | None = None
        while True:
            attempt += 1
            server = await self._acquire(retry=attempt > 1, avoid=last, only=on)
            last = server
            if attempt == 1 and self.stop.is_set():  # stopped while this one waited: keep it
                self._release(server, None, None, counted=False)
                self.failure_reasons["not_sent"] += 1
                raise RequestFailed(BackendError("not_sent", self.stopped_reason or "stopped"), 0)
            try:
                result = await self._watched(server, op(server.backend))
            except BackendError as exc:
                self._release(server, None, exc)
                if not exc.retryable or attempt >= self.policy.max_attempts or self.stop.is_set():
                    self._final_failure(exc)
                    raise RequestFailed(exc, attempt) from exc
                self.retries += 1
                self.retry_reasons[exc.reason] += 1
            else:
                self._release(server, float(work(result)) if work else 1.0, None)
                self.completed += 1
                server.requests += 1
                self._consecutive_failures = 0
                return result, attempt
            delay = min(self.policy.max_backoff_s, self.policy.backoff_s * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + self._rng.random()))

    async def _watched(self, server: _Server, coro: Awaitable[T]) -> T:
        """Await `coro` until it answers or the server shows no progress for timeout_s."""
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(coro)
        start = loop.time()
        timeout = self.policy.timeout_s
        try:
            while True:
                quiet = loop.time() - max(start, server.last_evidence)
                if quiet >= timeout and server.has_progress_view:
                    await self._probe(server)  # look again before giving up: this process
                    quiet = loop.time() - max(start, server.last_evidence)  # may have stalled
                if quiet >= timeout:
                    break
                done, _ = await asyncio.wait({task}, timeout=timeout - quiet)
                if done:
                    return task.result()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, BackendError):
                    await task
        raise BackendError(
            "timeout",
            f"{server.backend.url} showed no progress for {timeout:g}s "
            f"(progress from {server.progress_source})",
        )

    # -- routing and limits ---------------------------------------------------------------------

    def _pick(
        self, now: float, avoid: _Server | None = None, only: Backend | None = None
    ) -> _Server | None:
        if only is not None:  # a reading of that server's own state: joined or not
            up = [s for s in self.servers if s.backend is only and s.down_until <= now]
        else:
            up = [s for s in self.servers if s.joined and s.down_until <= now]
        free = [s for s in up if s.outstanding < s.limit.value]
        if avoid is not None and any(s is not avoid for s in free):
            free = [s for s in free if s is not avoid]  # a retry prefers another server
        if not free:
            return None
        return min(free, key=lambda s: (s.outstanding, s.outstanding / s.limit.value))

    async def _acquire(
        self, retry: bool, avoid: _Server | None = None, only: Backend | None = None
    ) -> _Server:
        """A slot on the least-loaded server with room; retries go before first attempts (a
        request being retried keeps its place, so a dead server fails fast)."""
        loop = asyncio.get_running_loop()
        while True:
            now = loop.time()
            server = self._pick(now, avoid, only)
            if server is not None and (retry or not self._waiters[True]):
                break
            cooling = [
                s.down_until - now
                for s in self.servers
                if (s.joined or s.backend is only) and s.down_until > now
            ]
            waiter = loop.create_future()
            queue = self._waiters[retry]
            queue.append(waiter)
            try:
                await asyncio.wait_for(waiter, max(0.01, min(cooling)) if cooling else None)
            except TimeoutError:
                pass
            finally:
                if waiter in queue:
                    queue.remove(waiter)
        server.outstanding += 1
        if server.outstanding >= server.limit.value:
            server.limit.saturated(loop.time())
        if server.monitor is None:
            server.monitor = asyncio.create_task(self._monitor(server))
        return server

    def _wake(self, count: int) -> None:
        """Wake `count` waiters, retries first."""
        for queue in (self._waiters[True], self._waiters[False]):
            while queue and count > 0:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    count -= 1

    def _release(
        self,
        server: _Server,
        work: float | None,
        error: BackendError | None,
        counted: bool = True,
    ) -> None:
        now = asyncio.get_running_loop().time()
        changed = False
        if not counted:
            pass
        elif error is None:
            server.last_evidence = now  # an answer is progress
            server.connection_failures = 0
            server.cooloffs = 0
            changed = server.limit.completed(work or 0.0, now)
        else:
            if error.overload:
                changed = server.limit.overloaded()
            if error.reason in ("connection_error", "timeout"):
                server.connection_failures += 1
                # a server that refuses connections while others serve leaves routing and
                # is probed back in by its readiness check; the last one cools off instead:
                # its retries probe it and requests not yet sent wait (or are not sent once
                # the breaker trips) instead of each failing against it
                others = any(s.joined and s is not server for s in self.servers)
                if server.connection_failures >= _Server.DOWN_AFTER and others:
                    # others serve: out of routing until its readiness check answers again
                    server.connection_failures = 0
                    self._start_join(server)
                elif server.connection_failures >= _Server.DOWN_AFTER:
                    cool = min(
                        self.policy.max_backoff_s, self.policy.backoff_s * 2**server.cooloffs
                    )
                    server.down_until, server.cooloffs = now + cool, server.cooloffs + 1
                    server.connection_failures = 0
        server.outstanding -= 1
        self._wake(sum(s.limit.value for s in self.servers) if changed else 1)

    def _final_failure(self, error: BackendError) -> None:
        """Circuit breaker: a permanent answer means the server is alive; a run of requests
        that exhausted their retries on transient reasons means it is not."""
        self.failure_reasons[error.reason] += 1
        if not error.retryable:
            self._consecutive_failures = 0
            return
        self._consecutive_failures += 1
        limit = self.policy.max_consecutive_failures
        if limit and self._consecutive_failures >= limit and not self.stop.is_set():
            self.stopped_reason = (
                f"servers_failing: {self._consecutive_failures} requests in a row failed after "
                f"{self.policy.max_attempts} attempts (last: {error.reason})"
            )
            self.stop.set()  # in-flight requests finish; what was not sent stays for a resume

    # -- progress -------------------------------------------------------------------------------

    async def _monitor(self, server: _Server) -> None:
        """While the server holds requests, read its progress every probe_s."""
        while server.has_progress_view:
            if server.outstanding:
                await self._probe(server)
            await asyncio.sleep(self.policy.probe_s)

    async def _probe(self, server: _Server) -> None:
        """Read the server's progress once (concurrent callers share the read), waiting at
        most min(timeout_s, 30) s: a frozen server answers nothing."""
        if server.probe is None or server.probe.done():
            server.probe = asyncio.ensure_future(self._read_progress(server))
        # asyncio.wait, not wait_for(shield(...)): Python 3.11's wait_for returns the result
        # and drops a cancellation that arrives as the probe finishes, and a monitor that
        # outlives its cancel hangs close() (and asyncio.run's shutdown) for good
        done, _ = await asyncio.wait({server.probe}, timeout=min(self.policy.timeout_s, 30))
        for probe in done:
            probe.result()  # a failure that is not a BackendError surfaces, as it did

    async def _read_progress(self, server: _Server) -> None:
        try:
            seen = await server.backend.progress()
        except BackendError:
            seen = Progress(alive=False)
        if seen is None:  # no view of its progress: its answers are the only evidence
            server.has_progress_view = False
            server.progress_source = "answers"
            return
        server.probes += 1
        now = asyncio.get_running_loop().time()
        if seen.work is not None:
            server.progress_source = "work counter"
            if server.last_work is not None and seen.work > server.last_work:
                server.last_evidence = now
            server.last_work = seen.work
        elif seen.alive:
            server.progress_source = "health"
            server.last_evidence = now


__all__ = ["AdaptiveLimit", "ClientPolicy", "RequestFailed", "ServerPool"]
