"""`eyas capture --backend vllm` against the fake vLLM (its capture files, its faults): the
states arrive exactly, a torn or partial file is read again, then retried, then recorded as a
failure with its reason; nothing is left in the server's storage."""

import json
import threading
import time

import pytest
import torch
from safetensors.torch import save_file

from eyas.backends.reasons import BackendError
from eyas.backends.vllm.capture import read_capture_file
from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.store.captures import StateReader, read_capture_index
from eyas.testing.fake_vllm import fake_states
from eyas.testing.server import fake_server


def _capture(tmp_path, toy_tiny, toy_samples, *fake_args, **cfg):
    incoming = tmp_path / "incoming"
    args = ("--capture-dir", str(incoming), "--layers", "4", "--hidden", "96", *fake_args)
    with fake_server("eyas.testing.fake_vllm", *args) as srv:
        config = CaptureConfig(
            target=toy_tiny,
            data=toy_samples,
            out=tmp_path / "cap",
            backend="vllm",
            urls=[srv.url],
            dtype="float32",
            limit=6,
            **cfg,
        )
        return run_capture(config, log=lambda s: None), incoming


@pytest.mark.slow
def test_capture_through_vllm_stores_the_servers_states(tmp_path, toy_tiny, toy_samples):
    manifest, incoming = _capture(tmp_path, toy_tiny, toy_samples, "--fault-schedule", "torn")
    assert manifest.counts.samples == 6 and manifest.failure_reasons == {}
    # the torn file was read again, given up, and the request sent again
    assert manifest.this_run.retry_reasons == {"hidden_states_torn": 1}
    assert manifest.client is not None
    assert manifest.client["servers"][0]["progress_source"] == "work counter"
    rows, _ = read_capture_index(tmp_path / "cap")
    reader = StateReader()
    for row in rows:
        assert torch.equal(reader.read(row), fake_states(row.input_ids, 4, 96))
    assert not list(incoming.iterdir())  # every file read and removed, the torn one too


@pytest.mark.slow
def test_a_capture_file_that_stays_torn_is_a_recorded_failure(tmp_path, toy_tiny, toy_samples):
    manifest, incoming = _capture(
        tmp_path, toy_tiny, toy_samples, "--fault-rate", "1", "--faults", "torn", max_attempts=2
    )
    assert manifest.counts.samples == 0
    assert manifest.failure_reasons == {"hidden_states_torn": 6}
    errors = [json.loads(x) for x in (tmp_path / "cap" / "errors.jsonl").read_text().splitlines()]
    assert {e["reason"] for e in errors} == {"hidden_states_torn"} and len(errors) == 6
    assert all(e["attempts"] == 2 for e in errors)
    assert not list(incoming.iterdir())


def test_a_file_read_while_it_is_being_written_is_read_again(tmp_path):
    """Shared storage whose locks are not coherent: the first read sees half a file."""
    path = tmp_path / "x.safetensors"
    whole = {"hidden_states": torch.randn(5, 4, 8), "token_ids": torch.arange(5)}
    save_file(whole, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    finisher = threading.Timer(0.15, lambda: path.write_bytes(data))
    finisher.start()
    start = time.perf_counter()
    got = read_capture_file(str(path))
    finisher.join()
    assert torch.equal(got["hidden_states"], whole["hidden_states"])
    assert time.perf_counter() - start >= 0.1 and not path.exists()
    path.write_bytes(data[:10])
    with pytest.raises(BackendError) as info:
        read_capture_file(str(path))
    assert info.value.reason == "hidden_states_torn" and info.value.retryable
    assert not path.exists()
