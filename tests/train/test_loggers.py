"""Training curves in TensorBoard (by default, the package installed): the event files `eyas
train` writes, read back with TensorBoard's own reader, hold each step's metrics once, across
a kill and resume too; a logger asked for without its package is one error line."""

import json
import sys

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from eyas.cli import app
from eyas.train.loop import Trainer
from train_helpers import toy_train_config


def read_events(out) -> dict[str, dict[int, float]]:
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    return {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}


def test_train_writes_tensorboard_curves_a_reader_reads_back(tmp_path, toy_tiny, toy_samples):
    out = tmp_path / "run"
    args = ["train", "--target", toy_tiny, "--data", toy_samples, "--out", out, "--steps", "4"]
    args += ["--ttt", "3", "--draft-vocab", "400", "--batch-tokens", "3000", "--lr", "3e-3"]
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    curves = read_events(out)
    assert curves["train/loss"] == pytest.approx({r["step"]: r["loss"] for r in rows}, rel=1e-6)
    for k in range(3):  # each TTT step's accuracy, and the acceptance length they imply
        assert curves[f"train/acc_step{k + 1}"] == pytest.approx(
            {r["step"]: r["per_step_acc"][k] for r in rows}, abs=1e-6
        )
    assert curves["train/acceptance_estimate"] == pytest.approx(
        {r["step"]: r["acceptance_estimate"] for r in rows}, abs=1e-5
    )
    assert curves["train/lr"] == pytest.approx({r["step"]: r["lr"] for r in rows}, rel=1e-6)
    # throughput: the step's trained tokens over the seconds it took
    elapsed = [0.0] + [r["elapsed_s"] for r in rows]
    for i, r in enumerate(rows):
        want = r["trained_positions"] / (elapsed[i + 1] - elapsed[i])
        assert curves["train/tokens_per_s"][r["step"]] == pytest.approx(want, rel=1e-5)


def test_a_resumed_run_logs_each_step_once(tmp_path, toy_tiny, toy_samples):
    cfg = toy_train_config(toy_tiny, tmp_path / "r", data=toy_samples, steps=5, checkpoint_every=2)

    class Killed(Exception):
        pass

    def die_at_3(m):
        if m.step == 3:
            raise Killed  # step 3 is logged, its checkpoint (at 4) never written

    first = Trainer(cfg, log=lambda s: None)
    first.setup()
    with pytest.raises(Killed):
        first.train(die_at_3)
    first.cleanup()
    resumed = Trainer(cfg, log=lambda s: None)
    resumed.setup()
    assert resumed.step == 2
    history = resumed.train()
    resumed.cleanup()
    losses = read_events(tmp_path / "r")["train/loss"]
    # steps 1-2 from the first run, 3-5 from the resumed one (its step 3, not the killed one's)
    assert sorted(losses) == [1, 2, 3, 4, 5]
    assert {s: losses[s] for s in (3, 4, 5)} == pytest.approx(
        {m.step: m.loss for m in history}, rel=1e-6
    )


def test_log_to_none_writes_no_events(tmp_path, toy_tiny, toy_samples):
    cfg = toy_train_config(toy_tiny, tmp_path / "n", data=toy_samples, steps=1, log_to=["none"])
    trainer = Trainer(cfg, log=lambda s: None)
    trainer.setup()
    trainer.train()
    assert (tmp_path / "n" / "metrics.jsonl").exists()
    assert not (tmp_path / "n" / "tensorboard").exists()


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_a_logger_without_its_package_is_one_error_line(
    tmp_path, toy_tiny, toy_samples, name, monkeypatch
):
    monkeypatch.setitem(sys.modules, name, None)  # import NAME -> ImportError
    args = ["train", "--target", toy_tiny, "--data", toy_samples, "--out", tmp_path / "o"]
    args += ["--steps", "1", "--draft-vocab", "400", "--log-to", name]
    res = CliRunner().invoke(app, [str(a) for a in args])
    assert res.exit_code == 2 and f"pip install {name}" in res.output, res.output
    assert "[missing_package]" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o" / "metrics.jsonl").exists()  # it failed before the first step
