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
        "no_tool_clean_rate",
        "stop_rate",
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


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_toys_of_other_seeds_pass_the_quality_gates(seed):
    """Other seeds stand in for other machines' floating point: the build trains on until the
    gates hold, and records what it measured."""
    from eyas.toy.build import QUALITY_GATES, build_toy, failed_gates, load_toy_info

    info = load_toy_info(build_toy("tiny", seed=seed))
    quality = info["quality"]
    assert failed_gates(quality) == []
    assert all(quality[name] >= floor for name, floor in QUALITY_GATES.items())
    assert info["quality_gates"] == QUALITY_GATES and info["seed"] == seed
    assert quality["num_tool_prompts"] > 50 and quality["num_no_tool_prompts"] > 100
    assert len(info["training"]["rounds"]) >= 1


def test_a_toy_that_cannot_reach_its_gates_fails_clearly(monkeypatch, tmp_path):
    import eyas.toy.build as build
    from eyas.errors import EyasError

    monkeypatch.setattr(build, "MAX_EXTRA_ROUNDS", 0)
    monkeypatch.setitem(build.QUALITY_GATES, "tool_call_rate", 1.01)  # unreachable
    monkeypatch.setitem(
        build.PRESETS,
        "tiny",
        build.PRESETS["tiny"].__class__(
            **{**build.PRESETS["tiny"].__dict__, "rows_per_family": 10, "epochs": 0.2}
        ),
    )
    with pytest.raises(EyasError, match="missed its quality gates"):
        build.build_toy("tiny", out=tmp_path / "toy", seed=5)
    assert not (tmp_path / "toy").exists()  # nothing half-built is published
