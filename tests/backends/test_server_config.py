"""One `ServerConfig` for every command that talks to servers: generate, capture, served eval
and train's streamed capture each carry one, take the same flags for it (train's prefixed
`--capture-`), and the pool each builds gets exactly those settings. Configs written before
(flat capture keys, eval's `urls`/`retry`, train's `capture_urls`) still load."""

import json

import pytest
from typer.testing import CliRunner

from eyas.backends.policy import ServerPool
from eyas.backends.reasons import BackendError
from eyas.capture.config import CaptureConfig
from eyas.cli import app
from eyas.config import ServerConfig, build_config
from eyas.evaluate.config import EvalConfig
from eyas.generate.config import PipelineConfig
from eyas.testing.server import fake_server
from eyas.train.config import TrainConfig
from eyas.train.loop import run_train
from train_helpers import toy_train_config

URL = "http://127.0.0.1:9"  # never asked: the pool's readiness check is stubbed
FLAGS = {"timeout": "7.5", "max-attempts": "3", "concurrency": "5", "backoff-s": "0.25"}


def _flags(prefix: str = "") -> list[str]:
    return [part for k, v in FLAGS.items() for part in (f"--{prefix}{k}", v)]


@pytest.fixture
def pools(monkeypatch):
    """Every pool a command opens, as it stood when its readiness check began; the check
    then refuses (`server_not_ready`), so the command stops there."""
    opened: list[ServerPool] = []

    async def refuse(self):
        opened.append(self)
        raise BackendError("server_not_ready", "stubbed in this test")

    monkeypatch.setattr(ServerPool, "ready", refuse)
    return opened


def test_every_server_command_builds_its_pool_from_its_server_config(
    tmp_path, pools, kimi_dir, rendered_prompts, toy_tiny, toy_samples
):
    commands = {
        "generate": [
            *("generate", "--model", kimi_dir, "--input", rendered_prompts),
            *("--out", tmp_path / "gen", "--backend", "sglang", "--url", URL, "--no-progress"),
            *_flags(),
        ],
        "capture": [
            *("capture", "--target", toy_tiny, "--data", toy_samples, "--out", tmp_path / "c"),
            *("--backend", "vllm", "--url", URL, *_flags()),
        ],
        "eval": [
            *("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples),
            *("--backend", "sglang", "--url", URL, "--no-lossless-check", *_flags()),
        ],
        "train": [
            *("train", "--target", toy_tiny, "--data", toy_samples, "--out", tmp_path / "t"),
            *("--steps", "2", "--draft-vocab", "400", "--max-len", "1024"),
            *("--capture-ahead", "1", "--capture-backend", "vllm", "--capture-url", URL),
            *_flags("capture-"),
        ],
    }
    for name, argv in commands.items():
        before = len(pools)
        res = CliRunner().invoke(app, [str(a) for a in argv])
        assert res.exit_code != 0, f"{name}: {res.output}"  # refused by the stub, as meant
        assert len(pools) == before + 1, f"{name} opened no pool: {res.output}"
        pool = pools[-1]
        assert [s.backend.url for s in pool.servers] == [URL], name
        p = pool.policy
        got = (p.timeout_s, p.max_attempts, p.concurrency, p.backoff_s)
        assert got == (7.5, 3, 5, 0.25), f"{name}: {got}"

    # each command's config carries a ServerConfig (the one the pool above came from)
    server = {
        "generate": build_config(
            PipelineConfig,
            None,
            {"model.dir": kimi_dir, "backend.kind": "sglang", "backend.urls": [URL]},
        ).backend,
        "capture": CaptureConfig(target=toy_tiny, data=toy_samples, out=tmp_path).server,
        "eval": EvalConfig(target=toy_tiny, drafter=tmp_path, input=toy_samples).server,
        "train": toy_train_config(toy_tiny, tmp_path, data=toy_samples).capture_server,
    }
    assert all(isinstance(s, ServerConfig) for s in server.values()), server
    # the per-command defaults: capture (batch and streamed) 8 in flight, eval adaptive off
    assert server["capture"].concurrency == server["train"].concurrency == 8
    assert server["capture"].retry.max_attempts == 4 and server["train"].retry.max_attempts == 5
    assert server["eval"].adaptive_concurrency is False


def test_configs_written_before_still_load(tmp_path, toy_tiny, toy_samples):
    base = {"target": toy_tiny, "data": toy_samples, "out": tmp_path}
    old = CaptureConfig(
        **base, backend="vllm", urls=[URL], timeout_s=9.0, max_attempts=2, concurrency=3
    )
    s = old.server
    assert (s.urls, s.timeout_s, s.retry.max_attempts, s.concurrency) == ([URL], 9.0, 2, 3)
    assert s.ready_timeout_s == 300.0  # capture's own default, kept for the keys not given

    ev = EvalConfig(
        target=toy_tiny, drafter=tmp_path, input=toy_samples, backend="sglang", urls=[URL],
        timeout_s=4.0, retry={"max_attempts": 7},
    )  # fmt: skip
    assert (ev.server.urls, ev.server.timeout_s, ev.server.retry.max_attempts) == ([URL], 4.0, 7)

    tr = TrainConfig.model_validate(
        {**base, "capture_ahead": 1, "capture_urls": [URL], "capture_concurrency": 2}
    )
    assert tr.capture_server.urls == [URL] and tr.capture_server.concurrency == 2

    toml = tmp_path / "cap.toml"  # an old capture config file, as users wrote them
    toml.write_text(
        f'target = "{toy_tiny}"\ndata = "{toy_samples}"\nout = "o"\nbackend = "vllm"\n'
        'url_file = "urls.txt"\nmax_attempts = 6\n'
    )
    loaded = build_config(CaptureConfig, toml)
    assert loaded.server.url_file == tmp_path / "urls.txt"  # relative to the file, as before
    assert loaded.server.retry.max_attempts == 6


def test_an_old_and_a_new_key_for_one_setting_is_one_error_line(toy_tiny, toy_samples, tmp_path):
    res = CliRunner().invoke(
        app,
        [
            *("capture", "--target", str(toy_tiny), "--data", str(toy_samples)),
            *("--out", str(tmp_path / "c"), "--backend", "vllm", "--url", URL),
            *("--max-attempts", "3", "--set", "max_attempts=5"),
        ],
    )
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0].startswith("deprecated: max_attempts"), res.output
    assert lines[1].startswith("error:"), res.output
    assert "max_attempts is the old name of server.retry.max_attempts" in res.output
    assert "Traceback" not in res.output


def test_streamed_capture_retries_a_failed_request_with_its_settings(
    tmp_path, toy_tiny, toy_samples
):
    """A fake vLLM answers the first capture request with a 503: the streamed capture retries
    it (its --capture-* settings reach the pool) and training runs to its last step."""
    cap = tmp_path / "incoming"
    fake = ("--fault-schedule", "503", "--capture-dir", str(cap), "--layers", "4")
    with fake_server("eyas.testing.fake_vllm", *fake, "--hidden", "96") as srv:
        out = tmp_path / "run"
        server = {"urls": [srv.url], "timeout_s": 42.0, "retry": {"max_attempts": 2}}
        server["retry"]["backoff_s"] = 0.01
        cfg = toy_train_config(
            toy_tiny,
            out,
            data=toy_samples,
            capture_ahead=1,
            capture_backend="vllm",
            capture_server=server,
            steps=2,
        )
        run_train(cfg, log=lambda s: None)
    client = json.loads((out / "spool" / "client.json").read_text())
    assert client["retry_reasons"] == {"server_error": 1}, client
    assert client["failure_reasons"] == {}, client
    assert (client["timeout_s"], client["max_attempts"]) == (42.0, 2), client
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(m.get("step", 0) for m in metrics) == 2, metrics[-1]


def test_eval_asks_its_baseline_servers_with_the_same_settings(
    pools, tmp_path, toy_tiny, toy_samples
):
    """The baseline run (the target without a drafter, at --baseline-url) goes through a pool
    with eval's server settings, at the baseline URLs only (never the url file's servers,
    which serve the drafter)."""
    import asyncio

    from eyas.errors import RefusedError
    from eyas.evaluate.prompts import Rounds
    from eyas.evaluate.served import _served_run

    base = "http://127.0.0.1:10"
    server = {"urls": [URL], "url_file": tmp_path / "u.txt", "timeout_s": 3.0}
    server.update(retry={"max_attempts": 2}, concurrency=6)
    cfg = EvalConfig(
        target=toy_tiny, drafter=tmp_path, input=toy_samples, backend="sglang", server=server,
        baseline_urls=[base],
    )  # fmt: skip
    prompts = [{"id": f"p{i}", "dataset": "d", "prompt_ids": [1, 2]} for i in range(3)]
    with pytest.raises(RefusedError):
        asyncio.run(_served_run(cfg, cfg.baseline_urls, Rounds(prompts), None))
    pool = pools[-1]
    assert [s.backend.url for s in pool.servers] == [base] and pool.url_file is None
    p = pool.policy
    assert (p.timeout_s, p.max_attempts, p.concurrency, p.adaptive) == (3.0, 2, 6, False)


def test_engine_options_written_before_still_load(tmp_path, toy_tiny, toy_samples):
    """What only one engine reads moved into its own options (`engine.*`); the old keys and
    `--vllm-python` still load, as those options."""
    from eyas.backends.sglang.options import SGLangOptions
    from eyas.backends.vllm.options import VLLMOptions

    toml = tmp_path / "p.toml"
    toml.write_text(
        '[model]\ndir = "m"\n[backend]\nkind = "vllm"\nurls = ["http://a:1"]\n'
        'vllm_endpoint = "generate"\nserved_model = "kimi"\nbatch_size = 1\n'
    )
    cfg = build_config(PipelineConfig, toml)
    assert cfg.engine == VLLMOptions(endpoint="generate", served_model="kimi")
    assert "vllm_endpoint" not in cfg.backend.model_dump()
    sglang = build_config(
        PipelineConfig, None, {"model.dir": "m", "backend.kind": "sglang", "backend.urls": [URL]},
        ["backend.batch_size=4"],
    )  # fmt: skip
    assert sglang.engine == SGLangOptions(batch_size=4)
    # an old key the engine has no option for: ignored at its old default, refused otherwise
    with pytest.raises(ValueError, match=r"backend\.batch_size is not an option of engine 'vllm'"):
        build_config(PipelineConfig, toml, None, ["backend.batch_size=8"])
    with pytest.raises(ValueError, match=r"the old name of engine\.endpoint: give one"):
        build_config(PipelineConfig, toml, None, ["engine.endpoint=completions"])

    py = tmp_path / "python"
    py.write_text("")
    old = {"target": toy_tiny, "drafter": tmp_path, "input": toy_samples, "backend": "vllm"}
    ev = EvalConfig(**old, vllm_python=py)
    assert ev.engine.python == py and isinstance(ev.engine, VLLMOptions)
    cap = toml.with_name("cap.toml")  # an old capture config file: the path is the file's
    cap.write_text(
        f'target = "{toy_tiny}"\ndata = "{toy_samples}"\nout = "o"\nbackend = "vllm"\n'
        'vllm_python = "python"\n'
    )
    assert build_config(CaptureConfig, cap).engine.python == py
    res = CliRunner().invoke(
        app,
        [
            *("eval", "--target", str(toy_tiny), "--drafter", str(tmp_path)),
            *("--input", str(toy_samples), "--backend", "sglang", "--vllm-python", str(py)),
        ],
    )  # eyas starts no SGLang servers: one error line, no traceback
    assert res.exit_code == 2 and "not an option of this engine" in res.output, res.output
    assert "Traceback" not in res.output
