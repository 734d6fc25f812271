"""The toy world: tokenizer, template, datasets and the tiny target."""

import json
import subprocess
import sys

import pytest
from safetensors.torch import load_file

from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows, write_datasets
from eyas.toy.tokenizer import KIMI_SPECIAL_TOKENS, template_text


def test_datasets_are_deterministic_and_all_convert(tmp_path):
    a = write_datasets(tmp_path / "a", 40, seed=2)
    b = write_datasets(tmp_path / "b", 40, seed=2)
    assert [p.read_bytes() for p in a.values()] == [p.read_bytes() for p in b.values()]
    for fam in FAMILIES:
        items = list(convert_rows(family_rows(fam, 60, seed=2), fam.format, fam.name))
        assert all(hasattr(i, "messages") or i.reason == "duplicate_conversation" for i in items)
        if fam.kind == "tool":
            assert any(i.tools for i in items if hasattr(i, "tools"))


def test_glaive_family_has_apostrophes_and_no_function_rows():
    rows = family_rows(next(f for f in FAMILIES if f.name == "b1_glaive"), 200)
    assert any("no access to external functions" in r["system"] for r in rows)
    assert any("'s" in r["chat"] and "<functioncall>" in r["chat"] for r in rows)
    assert any(r["system"].count('"name"') >= 2 for r in rows)


def test_tiny_target_loads_without_remote_code(toy_tiny):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_tiny)
    model = AutoModelForCausalLM.from_pretrained(toy_tiny)
    assert model.config.model_type == "llama"
    for token in KIMI_SPECIAL_TOKENS:
        assert len(tok(token, add_special_tokens=False)["input_ids"]) == 1, token
    assert tok.chat_template == template_text("kimi_k25")
    assert Renderer(toy_tiny).model_format.name == "kimi-k2.5"
    info = json.loads((toy_tiny / "toy.json").read_text())
    assert info["preset"] == "tiny" and set(info["quality"]) >= {
        "tool_call_rate",
        "chat_end_rate",
        "b1_naive_tool_call_rate",
    }


def test_tokenizer_round_trips_the_corpus(toy_tiny):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_tiny)
    for fam in FAMILIES:
        for row in family_rows(fam, 20, seed=4):
            text = json.dumps(row, ensure_ascii=False)
            assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


@pytest.mark.slow
def test_concurrent_builds_do_not_corrupt_and_are_deterministic(tmp_path, toy_tiny):
    out = tmp_path / "toy"
    cmd = [sys.executable, "-m", "eyas.cli", "toy", "build", "--preset", "tiny", "--out", str(out)]
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)
    ]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    assert not list(tmp_path.glob(".toy.tmp-*"))
    mine, ref = load_file(out / "model.safetensors"), load_file(toy_tiny / "model.safetensors")
    assert mine.keys() == ref.keys()
    assert all((mine[k] == ref[k]).all() for k in ref)  # same preset and seed: same weights
