"""The one client policy (`eyas.backends.policy`) against fake servers: a slow, busy server
finishes with zero wasted retries (its queue is not mistaken for death, and the in-flight
limit follows what it sustains), a server that dies is still detected (breaker), a frozen
server's hung connections are still retried, and the reason table decides what is retried."""

from __future__ import annotations

import asyncio
import time

import pytest

from eyas.backends.base import BackendSettings, GenRequest
from eyas.backends.policy import AdaptiveLimit, ClientPolicy, RequestFailed
from eyas.backends.reasons import REASONS, BackendError
from eyas.backends.registry import open_pool
from eyas.backends.server_config import RetryConfig, ServerConfig
from eyas.backends.sglang.client import parse_sglang_item
from eyas.backends.sglang.options import SGLangOptions
from eyas.testing.fake_sglang import fake_output
from eyas.testing.server import fake_server

STOP = [2]


def request(i: int, max_new: int = 8) -> GenRequest:
    return GenRequest(id=f"r{i}", prompt_ids=[7, 11 + i, 13], max_new_tokens=max_new, sampling={})


def _server(*, adaptive: bool = True, urls=(), url_file=None, **kw) -> ServerConfig:
    """A ServerConfig from the policy's own names (`adaptive`, retry keys at the top)."""
    retry = {k: kw.pop(k) for k in list(kw) if k in RetryConfig.model_fields}
    return ServerConfig(
        urls=list(urls), url_file=url_file, adaptive_concurrency=adaptive, retry=retry, **kw
    )


async def run_all(url, server, n, *, batch_size=1, during=None):
    """n requests through a pool; (results or RequestFailed, latencies, pool)."""
    settings = BackendSettings(stop_token_ids=STOP)
    server = server.serving([url])
    options = SGLangOptions(batch_size=batch_size)
    async with open_pool("sglang", settings, server, operation="generate", options=options) as pool:

        async def one(i):
            start = time.perf_counter()
            try:
                gen, _ = await pool.call(lambda b: b.generate(request(i)))
                return gen, time.perf_counter() - start
            except RequestFailed as exc:
                return exc, time.perf_counter() - start

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        if during is not None:
            await during(pool)
        done = await asyncio.gather(*tasks)
        return [d[0] for d in done], [d[1] for d in done], pool


@pytest.mark.slow
def test_a_slow_busy_server_finishes_with_zero_wasted_retries():
    """Each request takes 0.2 s and the server computes 4 at once: 32 in flight queue for
    1.6 s, longer than the 1 s timeout. Nothing is resubmitted, at the full limit (the server's
    progress keeps queued requests alive) or with the adaptive one (which settles below it)."""
    args = ("--capacity", "4", "--service-s", "0.2")
    timeout = 1.0
    with fake_server("eyas.testing.fake_sglang", *args) as server:
        fixed = _server(concurrency=32, adaptive=False, timeout_s=timeout)
        results, latencies, pool = asyncio.run(run_all(server.url, fixed, 40))
        assert all(not isinstance(r, RequestFailed) for r in results)
        assert max(latencies) > timeout  # the old total timeout would have cancelled these
        assert pool.retries == 0 and pool.completed == 40
        adaptive = _server(concurrency=32, adaptive=True, timeout_s=timeout)
        results, latencies, pool = asyncio.run(run_all(server.url, adaptive, 80))
    assert [r.output_ids for r in results] == [
        fake_output(request(i).prompt_ids, 8, STOP)[0] for i in range(80)
    ]
    assert pool.retries == 0
    limit = pool.servers[0].limit
    assert limit.history, "the limit was measured"
    assert limit.value < 32  # settled below the ceiling: more in flight only queues


def test_the_adaptive_limit_finds_a_servers_capacity():
    """A simulated server that completes `capacity` requests per second at any higher limit:
    the limit doubles from 4 while throughput grows, settles at the capacity, halves on
    overload and probes 1.5x higher after HOLD_WINDOWS windows."""
    for capacity in (4, 8, 16, 64):
        limit, now = AdaptiveLimit(256, adaptive=True), 0.0
        for _ in range(40):
            limit.saturated(now)
            rate = min(limit.value, capacity)
            for _ in range(limit.value + max(limit.MIN_WINDOW, 2 * limit.value)):
                now += 1 / rate
                limit.completed(1.0, now)
        assert limit.best_limit == capacity, (capacity, limit.history)
        assert limit.value in (capacity, int(capacity * 1.5))
    limit.overloaded()
    assert limit.value == limit.best_limit and limit.growing
    fixed = AdaptiveLimit(32, adaptive=False)
    fixed.saturated(0.0)
    assert not fixed.completed(1.0, 1.0) and fixed.value == 32


def test_a_server_that_dies_is_detected_by_the_breaker():
    policy = _server(
        concurrency=4, timeout_s=1.0, max_attempts=2, backoff_s=0.05, max_consecutive_failures=3
    )
    with fake_server("eyas.testing.fake_sglang", "--capacity", "2", "--service-s", "0.05") as srv:

        async def kill_after_some(pool):
            while pool.completed < 10:
                await asyncio.sleep(0.01)
            srv.kill()

        results, _, pool = asyncio.run(run_all(srv.url, policy, 200, during=kill_after_some))
    failed = [r for r in results if isinstance(r, RequestFailed)]
    assert pool.completed >= 10 and failed
    assert pool.stopped_reason.startswith("servers_failing: 3 requests in a row")
    assert {f.error.reason for f in failed} == {"connection_error", "not_sent"}
    assert set(pool.retry_reasons) == {"connection_error"}


@pytest.mark.slow
def test_hung_connections_on_a_frozen_server_are_retried_then_stopped():
    """SIGSTOP: the server holds its connections and answers nothing, /health included. The
    requests in flight time out (no progress) and are retried; the breaker ends the run."""
    policy = _server(
        concurrency=4, timeout_s=0.6, max_attempts=2, backoff_s=0.05, max_consecutive_failures=4
    )
    with fake_server("eyas.testing.fake_sglang", "--capacity", "2", "--service-s", "0.05") as srv:

        async def freeze_after_some(pool):
            while pool.completed < 10:
                await asyncio.sleep(0.01)
            srv.freeze()

        results, _, pool = asyncio.run(run_all(srv.url, policy, 60, during=freeze_after_some))
        srv.thaw()
    failed = [r for r in results if isinstance(r, RequestFailed)]
    assert pool.retry_reasons["timeout"] >= 1
    assert {f.error.reason for f in failed} == {"timeout", "not_sent"}
    assert pool.stopped_reason.startswith("servers_failing: 4 requests in a row")
    assert pool.servers[0].progress_source == "health"


def test_a_bad_item_in_a_batch_fails_alone():
    """SGLang answers a whole batch with 400 when one item is bad; the backend resends the
    items one by one, so only that item fails (permanently) and the rest are generated."""
    policy = _server(concurrency=8, timeout_s=5.0, max_attempts=3, backoff_s=0.01)

    async def go(url):
        settings = BackendSettings(stop_token_ids=STOP)
        options = SGLangOptions(batch_size=8)
        async with open_pool(
            "sglang", settings, policy.serving([url]), operation="generate", options=options
        ) as pool:
            reqs = [request(i) for i in range(8)]
            reqs[3] = GenRequest(id="long", prompt_ids=[5] * 64, max_new_tokens=8, sampling={})
            return await asyncio.gather(
                *(pool.call(lambda b, r=r: b.generate(r)) for r in reqs), return_exceptions=True
            ), pool

    with fake_server("eyas.testing.fake_sglang", "--context-length", "64") as srv:
        results, pool = asyncio.run(go(srv.url))
    assert isinstance(results[3], RequestFailed) and results[3].error.reason == "bad_request"
    assert results[3].attempts == 1
    assert all(not isinstance(r, BaseException) for i, r in enumerate(results) if i != 3)
    assert pool.retries == 0


@pytest.mark.parametrize(
    ("status", "reason", "retryable"),
    [(None, "server_abort", True), (400, "bad_request", False), (503, "server_error", True)],
)
def test_sglang_aborts_are_classified_by_their_status(status, reason, retryable):
    """`FINISH_ABORT(message, status_code, err_type).to_json()` (SGLang's schedule_batch.py);
    `Req.set_finish_with_abort` gives status 400: an invalid request, never retried."""
    item = {
        "text": "",
        "output_ids": [],
        "meta_info": {
            "finish_reason": {
                "type": "abort",
                "message": "Input length (70000 tokens) exceeds the maximum allowed length",
                "status_code": status,
                "err_type": "BadRequestError" if status == 400 else None,
            }
        },
    }
    with pytest.raises(BackendError) as info:
        parse_sglang_item(item)
    assert info.value.reason == reason and info.value.retryable is retryable


def test_every_reason_is_in_the_one_table():
    with pytest.raises(ValueError, match="REASONS"):
        BackendError("made_up_reason", "x")
    assert {r for r, v in REASONS.items() if not v.retryable} >= {
        "bad_request",
        "prompt_mismatch",
        "no_hidden_states",
    }
    assert REASONS["hidden_states_torn"].retryable and REASONS["timeout"].retryable


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_no_server_answering_is_refused_within_ready_timeout(tmp_path):
    """Two dead URLs and a url file with a bad line: the pool waits ready_timeout_s, not
    more, then refuses with one reason naming every URL; the bad line is counted."""
    from eyas.errors import RefusedError

    dead = [_closed_port_url(), _closed_port_url()]
    url_file = tmp_path / "urls.txt"
    url_file.write_text("# comment\n\nnot-a-url\n")
    server = _server(concurrency=2, ready_timeout_s=1.0, urls=dead, url_file=url_file)
    settings = BackendSettings(stop_token_ids=STOP)

    async def go():
        async with open_pool("sglang", settings, server, operation="generate"):
            pass

    start = time.perf_counter()
    with pytest.raises(RefusedError) as exc:
        asyncio.run(go())
    assert time.perf_counter() - start < 10
    assert exc.value.reason == "server_not_ready"
    assert all(url in str(exc.value) for url in dead)
    assert "server_not_ready: " in str(exc.value) and "checks failed" in str(exc.value)


def test_url_file_lines_are_read_and_bad_ones_counted(tmp_path):
    from eyas.backends.policy import ServerPool

    url_file = tmp_path / "urls.txt"
    url_file.write_text("http://a:1  # node a\nftp://b\n\nhttp://a:1/\nhttp://c:2\n")
    built = []
    pool = ServerPool(
        [],
        ClientPolicy(concurrency=1),
        new_backend=lambda u: built.append(u) or _Fake(u),
        url_file=url_file,
    )

    async def go():
        pool._read_url_file()
        urls = [s.backend.url for s in pool.servers]
        await pool.close()
        return urls

    assert asyncio.run(go()) == ["http://a:1", "http://c:2"]  # once per URL, in file order
    assert pool.url_file_reasons == {"not_an_http_url": 1}
    assert all(not s.joined for s in pool.servers)  # joined only once they answer


class _Fake:
    name, lossy, remote = "fake", False, True

    def __init__(self, url):
        self.url = url

    async def ready(self, timeout_s):
        raise BackendError("server_not_ready", "never")

    async def close(self):
        return None


class _Up(_Fake):
    async def ready(self, timeout_s):
        return {"url": self.url}


def test_fill_adds_workers_as_servers_join_and_a_cancelled_one_counts_as_returned():
    from eyas.backends.policy import ServerPool

    async def go():
        pool = ServerPool([_Up("http://a:1")], ClientPolicy(concurrency=2), new_backend=_Up)
        await pool.ready()
        release, tasks = asyncio.Event(), []

        async def worker():
            await release.wait()

        filling = asyncio.create_task(pool.fill(worker, 10, tasks))
        await asyncio.sleep(0.01)
        first = len(tasks)
        pool.add_url("http://b:2")
        await asyncio.sleep(0.01)
        grown = len(tasks)
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        release.set()
        await asyncio.wait_for(filling, 5)  # returns: no CancelledError from the cancelled one
        await pool.close()
        return first, grown

    assert asyncio.run(go()) == (2, 4)  # one server's ceiling, then two servers'
