"""Streamed capture (`--capture-ahead`): batches captured concurrently with their writes, a
bounded spool, and a producer failure that stops every rank with a reason within seconds."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from test_training import _train_cli, losses

from eyas.errors import EyasError
from eyas.testing.server import fake_server
from eyas.train.data import Sequence
from eyas.train.stream import CaptureStream


class _Pool:
    """A stand-in for `ServerPool`: each capture takes `delay_s`; records the most batches
    whose requests were in flight at once."""

    def __init__(self, delay_s: float, fail_at: int | None = None):
        self.delay_s, self.fail_at = delay_s, fail_at
        self.active: dict[str, int] = {}
        self.most_batches = 0

    async def call(self, fn, work=None):
        return await fn(self), 1

    async def capture(self, sample_id: str, ids: list[int]):
        batch = sample_id.split("/")[0]
        self.active[batch] = self.active.get(batch, 0) + 1
        self.most_batches = max(self.most_batches, len(self.active))
        await asyncio.sleep(self.delay_s)
        self.active[batch] -= 1
        if not self.active[batch]:
            del self.active[batch]
        if self.fail_at is not None and batch == f"b{self.fail_at}":
            raise RuntimeError("the engine went away")
        return torch.randn(len(ids), 4, 8)

    def describe(self):
        return {"requests": "stub"}


def _stream(tmp_path, pool, ahead, end, **kw) -> CaptureStream:
    def batch_at(p):
        return [Sequence(f"b{p}/{k}", "d", [1, 2, 3, 4] * 8, [1] * 32) for k in range(2)]

    @contextlib.asynccontextmanager
    async def open_pool():
        yield pool

    return CaptureStream(tmp_path / "spool", batch_at, open_pool, ahead, end, torch.float32, **kw)


def test_batches_are_captured_together_and_the_spool_stays_bounded(tmp_path):
    pool = _Pool(0.2)
    stream = _stream(tmp_path, pool, ahead=3, end=8)
    stream.start(0)
    shards = []
    for p in range(8):
        rows = stream.rows(p)
        assert sorted(rows) == [f"b{p}/0", f"b{p}/1"]
        shards.append(len(list(stream.spool.glob("batch-*.safetensors"))))
        stream.done(p)
    stream.stop(finished=True)
    # three batches were in flight at once (the pool counts them); a wall-clock bound would
    # measure the machine's load, not the stream
    assert pool.most_batches == 3, pool.most_batches
    assert max(shards) <= 3, shards
    assert not list(stream.spool.glob("batch-*"))


def test_the_byte_cap_holds_the_producer(tmp_path):
    stream = _stream(tmp_path, _Pool(0.01), ahead=8, end=8, max_bytes=1)
    stream.start(0)
    time.sleep(0.5)  # a free producer would have captured all 8 by now
    assert len(list(stream.spool.glob("batch-*.safetensors"))) == 1  # the next batch only
    for p in range(8):
        stream.rows(p)
        stream.done(p)
    stream.stop(finished=True)


def test_a_producer_failure_surfaces_with_its_reason(tmp_path):
    stream = _stream(tmp_path, _Pool(0.05, fail_at=2), ahead=2, end=8)
    stream.start(0)
    for p in range(2):
        stream.rows(p)
        stream.done(p)
    start = time.perf_counter()
    error = stream.wait([2])
    assert isinstance(error, EyasError) and error.reason == "capture_failed", error
    assert "the engine went away" in error.detail
    assert time.perf_counter() - start < 2
    stream.stop()


def test_a_producer_failure_on_one_rank_stops_both_ranks_within_seconds(
    tmp_path, toy_tiny, toy_samples
):
    """Two ranks (torchrun, gloo) stream from a fake vLLM whose first capture request gets a
    400: that rank's producer fails, and both ranks stop at the next step with
    `capture_failed` (before: the other rank waited up to an hour for rank 0's spool)."""
    cap = tmp_path / "cap"
    fake = ("--fault-schedule", "400", "--capture-dir", str(cap), "--layers", "4")
    with fake_server("eyas.testing.fake_vllm", *fake, "--hidden", "96") as srv:
        out = tmp_path / "run"
        config = tmp_path / "t.toml"
        config.write_text(
            f'target = "{toy_tiny}"\ndata = "{toy_samples}"\nout = "{out}"\nsteps = 6\n'
            f"ttt = 2\ndraft_vocab = 400\nmax_len = 1024\nbatch_tokens = 3000\ncapture_ahead = 2\n"
            f'capture_backend = "vllm"\ncapture_urls = ["{srv.url}"]\n'
        )
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
        cmd += ["--master-port", "29541", "-m", "eyas.cli", "train", "--config", str(config)]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        failed_at = None
        deadline = time.time() + 300
        while proc.poll() is None:
            assert time.time() < deadline, "the ranks did not stop"
            if failed_at is None and list((out / "spool").glob("rank-*/errors.jsonl")):
                failed_at = time.time()
            time.sleep(0.05)
        ended = time.time()
        log = " ".join(proc.stdout.read().decode().split())  # the console wraps lines
    assert proc.returncode != 0, log[-3000:]
    assert failed_at is not None, log[-3000:]
    assert ended - failed_at < 20, ended - failed_at  # seconds, not the old hour
    errors = [
        json.loads(line)
        for f in (out / "spool").glob("rank-*/errors.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert [e["reason"] for e in errors] == ["bad_request"], errors
    # both ranks say why: the failing one with its request's reason, the other names it
    assert log.count("capture_failed") >= 2, log[-3000:]
    assert "bad_request" in log and "the streamed capture of rank" in log, log[-3000:]
    assert not (out / "drafter").exists()


def test_two_ranks_streaming_their_own_shares_match_one_process(tmp_path, toy_tiny, toy_samples):
    """Each rank captures only the share it trains, into its own spool: the curve is the
    one-process curve (the 1-vs-2-rank tolerance: fp32 gradient sums in another order)."""
    common = (
        f'target = "{toy_tiny}"\ndata = "{toy_samples}"\nsteps = 4\nttt = 2\ndraft_vocab = 400\n'
        f"max_len = 1024\nbatch_tokens = 3000\nlr = 3e-3\nwarmup_steps = 1\ncapture_ahead = 2\n"
    )
    one, two = tmp_path / "one.toml", tmp_path / "two.toml"
    one.write_text(common + f'out = "{tmp_path / "one"}"\n')
    two.write_text(common + f'out = "{tmp_path / "two"}"\nspool_dir = "{tmp_path / "local"}"\n')
    _train_cli(one, 1)
    _train_cli(two, 2, port=29543)
    a, b = losses(tmp_path / "one" / "metrics.jsonl"), losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-4), (step, a, b)
    # each rank had a spool of its own, emptied at the end
    assert sorted(p.name for p in (tmp_path / "local").iterdir()) == ["rank-0", "rank-1"]
    assert not list((tmp_path / "local").rglob("batch-*"))
