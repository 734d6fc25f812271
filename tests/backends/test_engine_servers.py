"""The servers eyas starts are shaped by the engine's options, not by the CPU tests: the vLLM
command line (built without starting a server) takes the target's context unless given, eager
mode only when asked or without a CUDA GPU, tensor and data parallelism, the stage's flags and
then the user's extra arguments verbatim; `eyas eval --engine-arg ...` reaches it through the
command line; and a server's log lines that mean it cannot serve are read as vLLM writes them.
(The same command lines parsed by vLLM's own argument parser, and run on CPU:
`tests/integration/test_vllm_command_line.py`, `test_vllm_eval.py`.)"""

import json
import sys

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

import eyas.backends.server as server_module
import eyas.backends.vllm.server as vllm_server_module
from eyas.backends.vllm import conventions as vllm
from eyas.backends.vllm.capture import PLUGIN_DIR
from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.cli import app
from eyas.errors import EyasError
from eyas.hf_models import target_model
from eyas.testing.server import fake_server

PY = sys.executable  # a python that exists; nothing is started


def gpu(monkeypatch, present: bool) -> None:
    """This machine shows a CUDA GPU (or not), wherever eyas asks."""
    for where in (server_module, vllm_server_module):
        monkeypatch.setattr(where, "gpu_present", lambda: present)


def flag(args: list[str], name: str) -> str | None:
    """The value of `name` in a command line (`--name value` or `--name=value`)."""
    for i, a in enumerate(args):
        if a == name:
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


@pytest.fixture
def long_target(tmp_path, toy_tiny):
    """The toy target with a 32k context (its config only: nothing is loaded)."""
    config = json.loads((toy_tiny / "config.json").read_text())
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "config.json").write_text(
        json.dumps({**config, "max_position_embeddings": 32768})
    )
    return target_model(tmp_path / "long")


def test_a_cpu_server_is_eager_and_takes_the_targets_whole_context(monkeypatch, long_target):
    gpu(monkeypatch, False)
    server = VLLMServer(VLLMOptions(python=PY), long_target, dtype="float32")
    cmd = server.command(8123)
    assert cmd[:3] == [PY, "-m", vllm.SERVER_MODULE]
    assert flag(cmd, "--model") == str(long_target.dir) and flag(cmd, "--port") == "8123"
    assert flag(cmd, "--max-model-len") == "32768"  # no 8,192 cap: the target's context
    assert flag(cmd, "--dtype") == "float32" and "--enforce-eager" in cmd
    assert flag(cmd, "--tensor-parallel-size") is None and flag(cmd, "--data-parallel-size") is None


def test_a_gpu_server_is_compiled_unless_asked_and_parallel_as_asked(monkeypatch, long_target):
    gpu(monkeypatch, True)
    options = VLLMOptions(
        python=PY,
        tensor_parallel_size=8,
        data_parallel_size=2,
        max_model_len=65536,
        args=["--max-num-seqs=512", "--gpu-memory-utilization", "0.92"],
    )
    cmd = VLLMServer(options, long_target, args=["--stage-flag"]).command(1)
    assert "--enforce-eager" not in cmd
    assert flag(cmd, "--tensor-parallel-size") == "8" and flag(cmd, "--data-parallel-size") == "2"
    assert flag(cmd, "--max-model-len") == "65536" and flag(cmd, "--dtype") == "auto"
    # the stage's flags, then the user's, verbatim and last (so theirs win)
    assert cmd[-4:] == ["--stage-flag", "--max-num-seqs=512", "--gpu-memory-utilization", "0.92"]
    eager = VLLMOptions(python=PY, enforce_eager=True)
    assert "--enforce-eager" in VLLMServer(eager, long_target).command(1)


def test_a_flag_in_the_extra_arguments_is_not_given_twice(monkeypatch, long_target):
    gpu(monkeypatch, False)
    args = ["--max-model-len=1024", "--enforce-eager", "--dtype", "bfloat16"]
    cmd = VLLMServer(VLLMOptions(python=PY, args=args), long_target, dtype="float32").command(1)
    assert [a.split("=")[0] for a in cmd].count("--max-model-len") == 1
    assert cmd.count("--enforce-eager") == 1 and cmd.count("--dtype") == 1
    assert flag(cmd, "--max-model-len") == "1024" and flag(cmd, "--dtype") == "bfloat16"
    # an option and the same flag in the arguments: which one? refused
    with pytest.raises(ValidationError, match="-tp is set twice"):
        VLLMOptions(python=PY, tensor_parallel_size=2, args=["-tp", "4"])


def test_capture_and_drafter_launches(tmp_path, long_target):
    launch = VLLMServer.capture_launch([1, 2, 4], tmp_path / "incoming")
    spec = json.loads(flag(launch.args, "--speculative-config"))
    assert spec["method"] == "extract_hidden_states"
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 4]
    kv = json.loads(flag(launch.args, "--kv-transfer-config"))
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == str(tmp_path / "incoming")
    assert (PLUGIN_DIR / f"{kv['kv_connector_module_path']}.py").is_file()
    assert launch.env["PYTHONPATH"].split(":")[0] == str(PLUGIN_DIR)
    # a drafter: its speculative config as vLLM's flag; an MLA one in float32 names CPU_MLA
    drafter = tmp_path / "d"
    drafter.mkdir()
    (drafter / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    config = {"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3}
    assert json.loads(VLLMServer.drafter_launch(config, "float32")[1]) == config
    (drafter / "config.json").write_text(
        json.dumps({"architectures": [vllm.EAGLE3_MLA_ARCHITECTURE]})
    )
    mla = json.loads(VLLMServer.drafter_launch(config, "float32")[1])
    assert mla == {**config, **vllm.FLOAT32_MLA_DRAFTER}
    assert json.loads(VLLMServer.drafter_launch(config, "auto")[1]) == config


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        # torch's message (`torch.OutOfMemoryError`), as vLLM's workers log it
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "server_oom"),
        # vllm/v1/core/kv_cache_utils.py `_check_enough_kv_cache_memory`
        (
            "ValueError: No available memory for the cache blocks. Try increasing",
            "kv_cache_too_small",
        ),
        (
            "ValueError: To serve at least one request with the model's max seq len (262144), "
            "(17.16 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(1.0 GiB).",
            "kv_cache_too_small",
        ),
        # vllm/config/parallel.py `ParallelConfig.__post_init__`
        (
            "ValueError: World size (8) is larger than the number of available GPUs (4) in this node.",
            "not_enough_gpus",
        ),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "server_cuda_error"),
        ("INFO 12-04 09:00:01 [api_server.py:1] non-default args: {'model': 'x'}", None),
    ],
)
def test_the_lines_of_a_vllm_log_that_end_a_server(line, reason):
    fatal = VLLMServer.fatal(line)
    assert (fatal.reason if fatal else None) == reason


def test_a_missing_engine_python_is_one_error(tmp_path, toy_tiny):
    with pytest.raises(EyasError) as exc:
        VLLMServer(VLLMOptions(python=tmp_path / "nope"), target_model(toy_tiny)).start()
    assert exc.value.reason == "no_engine_python" and "--engine-python" in exc.value.detail


def test_eval_engine_args_reach_the_vllm_command_lines(
    monkeypatch, tmp_path, toy_tiny, toy_samples
):
    """`eyas eval --backend vllm --engine-arg --tensor-parallel-size=2` (the issue's command):
    both servers eyas starts (with the drafter, and the baseline) get it verbatim. Only the
    process start is replaced: each command line is recorded and a fake vLLM serves in its
    place, so the evaluation runs to its end."""
    gpu(monkeypatch, True)
    monkeypatch.setattr(
        "eyas.export.serving.speculative_config",
        lambda engine, drafter, target, k, scratch: {
            "method": "eagle3",
            "model": str(drafter),
            "num_speculative_tokens": k,
        },
    )
    started: list[list[str]] = []

    def start(self):
        started.append(self.command(9))
        fake = ("--spec-k", "3") if "--speculative-config" in self.launch_args() else ()
        self._fake = fake_server("eyas.testing.fake_vllm", *fake)
        self.url = self._fake.__enter__().url
        return self.url

    monkeypatch.setattr(VLLMServer, "start", start)
    monkeypatch.setattr(VLLMServer, "stop", lambda self: self._fake.__exit__(None, None, None))
    res = CliRunner().invoke(
        app,
        [
            *("eval", "--target", str(toy_tiny), "--drafter", str(tmp_path)),
            *("--input", str(toy_samples), "--backend", "vllm", "--engine-python", PY),
            *("--engine-arg", "--tensor-parallel-size=2", "--max-new-tokens", "16"),
            *("--baseline", "--no-lossless-check", "--json", str(tmp_path / "e.json")),
        ],
    )
    assert res.exit_code == 0, res.output
    spec, base = started
    for cmd in (spec, base):
        assert cmd[-1] == "--tensor-parallel-size=2" and "--enforce-eager" not in cmd
        assert flag(cmd, "--max-model-len") == str(target_model(toy_tiny).context_length)
    assert json.loads(flag(spec, "--speculative-config"))["num_speculative_tokens"] == 3
    assert flag(base, "--speculative-config") is None
    # the old flag is the new one's alias
    res = CliRunner().invoke(
        app,
        [
            *("eval", "--target", str(toy_tiny), "--drafter", str(tmp_path)),
            *("--input", str(toy_samples), "--backend", "vllm", "--vllm-python", PY),
            *("--engine-python", str(tmp_path)),
        ],
    )
    assert (
        res.exit_code == 2 and "--engine-python and --vllm-python set engine.python" in res.output
    )
