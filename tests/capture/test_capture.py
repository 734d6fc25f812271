"""`eyas capture` in process, and training from its output: the same curve as the online
target, only three named tensors of the target loaded, resumable after SIGKILL, a disk check,
and the streamed (`--capture-ahead`) mode."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.errors import EyasError, RefusedError
from eyas.store.captures import capture_shards, read_capture_index
from eyas.train.loop import run_train
from train_helpers import toy_train_config

pytestmark = pytest.mark.slow


def train_cfg(toy_tiny, out, **kw):
    return toy_train_config(toy_tiny, out, **kw)


def losses(out):
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def fp32_capture(module_tmp, toy_tiny, toy_samples):
    out = module_tmp("cap") / "fp32"
    run_capture(
        CaptureConfig(target=toy_tiny, data=toy_samples, out=out, dtype="float32"), log=print
    )
    return out


def test_training_from_fp32_captures_reproduces_the_online_curve(
    tmp_path, toy_tiny, toy_samples, fp32_capture, monkeypatch
):
    online = tmp_path / "online"
    run_train(train_cfg(toy_tiny, online, data=toy_samples), log=lambda s: None)

    def no_full_model(*a, **k):
        raise AssertionError("training from captures must not load the target model")

    monkeypatch.setattr("eyas.train.target.load_frozen_lm", no_full_model)
    captured = tmp_path / "captured"
    path = run_train(
        train_cfg(toy_tiny, captured, hidden_states=fp32_capture), log=lambda s: None
    ).drafter
    a, b = losses(online), losses(captured)
    assert len(a) == len(b) == 6
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (a, b)
    data = json.loads((path / "drafter_config.json").read_text())["data"]
    assert data["source"] == "captured"
    assert data["target_tensors_loaded"] == [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
    ]


def test_capture_manifest_and_shards(fp32_capture, toy_samples):
    rows, manifest = read_capture_index(fp32_capture)
    samples = [json.loads(line) for line in toy_samples.read_text().splitlines()]
    assert sorted(r.id for r in rows) == sorted(s["id"] for s in samples)
    by_id = {s["id"]: s for s in samples}
    for r in rows:
        s = by_id[r.id]
        assert r.input_ids == s["prompt_ids"] + s["output_ids"]
        assert r.loss_mask == [0] * len(s["prompt_ids"]) + [1] * len(s["output_ids"])
    assert manifest["layers"] == [1, 2, 3, 4] and manifest["aux_layers"] == [1, 2, 3]
    assert manifest["bytes_per_token"] == 4 * 96 * 4 + 5
    assert manifest["counts"]["samples"] == len(rows)


def test_the_disk_check_refuses_unless_forced(tmp_path, toy_tiny, toy_samples, monkeypatch):
    class Tiny:
        free = 1000

    monkeypatch.setattr("eyas.capture.run.shutil.disk_usage", lambda p: Tiny)
    cfg = CaptureConfig(target=toy_tiny, data=toy_samples, out=tmp_path / "c", limit=2)
    with pytest.raises(RefusedError, match="needs"):
        run_capture(cfg, log=lambda s: None)
    assert not capture_shards(tmp_path / "c")
    forced = run_capture(cfg.model_copy(update={"force": True}), log=lambda s: None)
    assert forced.counts.samples == 2


def test_a_killed_capture_resumes_without_loss_or_duplicates(tmp_path, toy_tiny, toy_samples):
    out = tmp_path / "cap"
    cmd = [
        sys.executable,
        "-m",
        "eyas.cli",
        "capture",
        "--target",
        str(toy_tiny),
        "--data",
        str(toy_samples),
        "--out",
        str(out),
        "--shard-size",
        "2",
        "--concurrency",
        "1",
    ]
    for _ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        start = len(capture_shards(out))
        while time.time() < deadline and len(capture_shards(out)) < start + 2:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    rows, _ = read_capture_index(out)
    ids = [r.id for r in rows]
    expected = [json.loads(line)["id"] for line in toy_samples.read_text().splitlines()]
    assert len(ids) == len(set(ids)) and sorted(ids) == sorted(expected)
    assert not list(out.glob(".part-*"))


def test_aux_layer_ids_must_be_inside_the_target(tmp_path, toy_tiny, toy_samples):
    # the tiny target has 4 layers: id 4 is post-norm in transformers, pre-norm in engines
    with pytest.raises(EyasError, match=r"1\.\.3"):
        run_train(
            train_cfg(toy_tiny, tmp_path / "o", data=toy_samples, aux_layers=[1, 2, 4]),
            log=lambda s: None,
        )
    with pytest.raises(EyasError, match=r"1\.\.3"):
        run_capture(
            CaptureConfig(
                target=toy_tiny, data=toy_samples, out=tmp_path / "c", aux_layers=[0, 1, 2]
            ),
            log=lambda s: None,
        )


def test_a_capture_fuses_the_methods_layers_and_training_refuses_other_layers(
    tmp_path, toy_tiny, toy_samples, fp32_capture
):
    """The capture asks the drafter method which layers it fuses and records the method; a
    drafter trained from a capture fuses what it fuses online, or training refuses (unless
    --aux-layers names the captured layers)."""
    from eyas.drafter.registry import get_method

    fused = get_method("dflash").default_aux_layers(4, None)
    out = tmp_path / "dflash-capture"
    manifest = run_capture(
        CaptureConfig(target=toy_tiny, data=toy_samples, out=out, method="dflash", limit=2),
        log=lambda s: None,
    )
    assert manifest.method == "dflash"
    assert manifest.aux_layers == fused and manifest.layers == [*fused, 4]
    eagle3_manifest = json.loads((fp32_capture / "manifest.json").read_text())
    assert eagle3_manifest["method"] == "eagle3" and eagle3_manifest["aux_layers"] == [1, 2, 3]
    # the 4-layer toy's DFlash and EAGLE-3 defaults coincide: one middle layer differs from both
    one = tmp_path / "one-layer"
    run_capture(
        CaptureConfig(
            target=toy_tiny, data=toy_samples, out=one, method="dflash", aux_layers=[2], limit=2
        ),
        log=lambda s: None,
    )

    def train(method: str, capture, **kw):
        out = tmp_path / f"{method}-{capture.name}-{len(kw)}"
        cfg = train_cfg(toy_tiny, out, method=method, hidden_states=capture, steps=2, **kw)
        return run_train(cfg, log=lambda s: None).drafter

    for method in ("dflash", "eagle3"):
        with pytest.raises(EyasError) as exc:
            train(method, one)
        assert exc.value.reason == "capture_layers_mismatch"
        assert "holds layers [2] (captured for dflash)" in str(exc.value)
        fuses = get_method(method).default_aux_layers(4, None)
        assert f"--method {method} fuses {fuses}" in str(exc.value)
    # named on purpose, the captured layers train
    path = train("dflash", one, aux_layers=[2])
    assert json.loads((path / "drafter_config.json").read_text())["aux_layer_ids"] == [2]


def test_streamed_capture_reproduces_the_curve_with_a_bounded_spool(
    tmp_path, toy_tiny, toy_samples, monkeypatch
):
    from eyas.train import stream

    peaks = []
    real_done = stream.CaptureStream.done

    def done(self, position):
        peaks.append(len(list(self.spool.glob("batch-*.safetensors"))))
        real_done(self, position)

    monkeypatch.setattr(stream.CaptureStream, "done", done)
    online = tmp_path / "online"
    run_train(train_cfg(toy_tiny, online, data=toy_samples), log=lambda s: None)
    streamed = tmp_path / "streamed"
    run_train(train_cfg(toy_tiny, streamed, data=toy_samples, capture_ahead=2), log=lambda s: None)
    a, b = losses(online), losses(streamed)
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (a, b)
    assert peaks and max(peaks) <= 3  # at most `ahead` batches waiting, plus the one in training
    assert not list((streamed / "spool").glob("batch-*"))


def test_bf16_captures_train_a_drafter_as_good_as_online(tmp_path, toy_tiny, toy_samples):
    from eyas.evaluate.config import EvalConfig
    from eyas.evaluate.run import run_eval

    bf16 = tmp_path / "bf16"
    run_capture(CaptureConfig(target=toy_tiny, data=toy_samples, out=bf16), log=lambda s: None)
    assert json.loads((bf16 / "manifest.json").read_text())["dtype"] == "bfloat16"
    kw = dict(steps=40, checkpoint_every=100, ttt=3)
    drafters = {
        "online": run_train(train_cfg(toy_tiny, tmp_path / "a", data=toy_samples, **kw)).drafter,
        "bf16": run_train(train_cfg(toy_tiny, tmp_path / "b", hidden_states=bf16, **kw)).drafter,
    }
    al = {
        name: run_eval(
            EvalConfig(target=toy_tiny, drafter=path, input=toy_samples, k=3, max_new_tokens=48),
            log=lambda s: None,
        ).acceptance_length
        for name, path in drafters.items()
    }
    assert abs(al["online"] - al["bf16"]) <= 0.1, al
