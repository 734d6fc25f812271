"""The typed capture result gives back the dict `run_capture` returned before it was typed.

`data/*.json` were written by the dict-returning code (the toy target, the in-process backend:
a first run, a resumed one with nothing left to capture, and a dry run; paths and host
replaced)."""

import json
from pathlib import Path

import pytest

from eyas.capture.result import CaptureDryRun, CaptureResult

DATA = Path(__file__).parent / "data"
RECORD = ["stage", "eyas_version", "input", "target", "backend", "method", "aux_layers"]
RECORD += ["layers", "layer_convention", "dtype", "bytes_per_token", "quarantine", "excluded"]
RECORD += ["shard", "storage_needed_bytes", "config", "job_id", "host", "pid", "pid_start", "state"]
RECORD += ["complete", "started_unix", "servers", "client", "stopped_reason", "this_run"]
RECORD += ["failure_reasons", "ended_unix", "counts", "run"]


@pytest.mark.parametrize("name", ["capture_result.json", "capture_resumed.json"])
def test_the_typed_capture_result_gives_back_the_old_dict(name):
    text = (DATA / name).read_text()
    old = json.loads(text)
    result = CaptureResult.from_dict(old)
    assert json.dumps(result.to_dict(), indent=2) + "\n" == text  # keys, order and values
    assert CaptureResult.from_dict(result.to_dict()) == result
    assert list(old) == RECORD
    assert list(old["counts"]) == ["samples", "tokens", "duplicates", "failed"]
    assert result.counts.tokens == old["counts"]["tokens"]
    assert result.layers == old["layers"] and result.bytes_per_token == old["bytes_per_token"]
    # a resumed job with nothing to send has only its skipped rows
    assert (result.this_run.stats is None) == ("samples_written" not in old["this_run"])
    assert result.this_run.samples_written == old["this_run"].get("samples_written", 0)


def test_the_dry_run_is_its_own_type():
    old = json.loads((DATA / "capture_dry_run.json").read_text())
    dry = CaptureDryRun(**old)
    assert dry.to_dict() == old and list(old) == list(dry.to_dict())
    assert dry.storage_needed_bytes == dry.tokens_to_go * dry.bytes_per_token
