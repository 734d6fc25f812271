"""`eyas train --aux-layers / --warmup-steps / --grad-accum`: flags of their config fields
(docs/serving.md and the trainer's own errors name them), reaching the trainer."""

import json

import pytest
from typer.testing import CliRunner

from eyas.cli import app


def _train(toy_tiny, toy_samples, out, *flags):
    args = ["train", "--target", toy_tiny, "--data", toy_samples, "--out", out, "--steps", "2"]
    args += ["--ttt", "2", "--draft-vocab", "400", "--batch-tokens", "3000", *flags]
    return CliRunner().invoke(app, [str(a) for a in args])


def test_train_flags_reach_the_trainer(tmp_path, toy_tiny, toy_samples):
    # the tiny target has 4 layers: an aux layer of 4 is refused by the method, so the flag
    # reached it
    bad = _train(toy_tiny, toy_samples, tmp_path / "bad", *("--aux-layers", 1, "--aux-layers", 4))
    assert bad.exit_code == 2 and "[bad_aux_layers]" in bad.output, bad.output
    flags = ("--aux-layers", 1, "--aux-layers", 2, "--aux-layers", 3)
    flags += ("--warmup-steps", 1, "--grad-accum", 2)
    res = _train(toy_tiny, toy_samples, tmp_path / "ok", *flags)
    assert res.exit_code == 0, res.output
    config = json.loads((tmp_path / "ok" / "drafter" / "drafter_config.json").read_text())
    assert config["aux_layer_ids"] == [1, 2, 3]
    trained = config["train_config"]
    assert (trained["warmup_steps"], trained["grad_accum"]) == (1, 2)
    metrics = (tmp_path / "ok" / "metrics.jsonl").read_text().splitlines()
    # each row logs the rate of the next step: with one warmup step the peak (1e-4) comes
    # right away, then the cosine decays to 0.1 x; with the default 20 it would be 2/20 x
    assert [json.loads(m)["lr"] for m in metrics] == pytest.approx([1e-4, 1e-5])
