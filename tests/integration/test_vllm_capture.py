"""`eyas capture --backend vllm` against the real vLLM on CPU: the server's hidden-state
extraction, through eyas's connector, gives transformers' states (the final layer before its
norm), and feeds `eyas train --hidden-states` with no target in the training process."""

import json

import pytest
import torch
from typer.testing import CliRunner

from eyas.backends.local.client import LocalBackend
from eyas.cli import app
from eyas.store.captures import StateReader, read_capture_index

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_vllm_capture_equals_transformers_and_trains(tmp_path, vllm_python, toy_tiny, toy_samples):
    out = tmp_path / "cap"
    res = CliRunner().invoke(
        app,
        [
            "capture",
            "--target",
            str(toy_tiny),
            "--data",
            str(toy_samples),
            "--out",
            str(out),
            "--backend",
            "vllm",
            "--vllm-python",
            str(vllm_python),
            "--dtype",
            "float32",
        ],
    )
    assert res.exit_code == 0, res.output + (out / "vllm-server.log").read_text()[-3000:]
    rows, manifest = read_capture_index(out)
    assert manifest["backend"] == "vllm" and manifest["layers"] == [1, 2, 3, 4]
    expected = [json.loads(line) for line in toy_samples.read_text().splitlines()]
    assert sorted(r.id for r in rows) == sorted(s["id"] for s in expected)
    assert not list((out / ".incoming").glob("*.safetensors"))  # moved into shards
    local = LocalBackend(toy_tiny, [], 0, device="cpu", capture_layers=manifest["layers"])
    reader = StateReader()
    worst = 0.0
    for row in rows[:12]:
        want = local._forward(row.input_ids)
        got = reader.read(row).float()
        worst = max(worst, float((got - want).abs().max()))
    assert worst < 1e-4, worst
    trained = CliRunner().invoke(
        app,
        [
            "train",
            "--target",
            str(toy_tiny),
            "--hidden-states",
            str(out),
            "--out",
            str(tmp_path / "d"),
            "--steps",
            "3",
            "--ttt",
            "2",
            "--draft-vocab",
            "300",
            "--batch-tokens",
            "3000",
        ],
    )
    assert trained.exit_code == 0, trained.output
    data = json.loads((tmp_path / "d" / "drafter" / "drafter_config.json").read_text())["data"]
    assert data["source"] == "captured" and len(data["target_tensors_loaded"]) == 3
    assert torch.isfinite(
        torch.tensor(
            json.loads((tmp_path / "d" / "metrics.jsonl").read_text().splitlines()[-1])["loss"]
        )
    )
