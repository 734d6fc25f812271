"""Rendering with a real template that has no tools (SmolLM2's ChatML): chat data renders to
exactly what transformers renders, a tool dataset is refused with its reason, and a mixed
dataset keeps its chat rows while every row that carries tools is rejected and counted."""

import json

import pytest
from real_helpers import CHAT, converted, invoke

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_chat_data_renders_as_transformers_does(smollm2, rendered):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2)
    assert {r["dataset"] for r in rendered} == set(CHAT)
    for row in rendered:
        turn = row["turn"]
        want = tok.apply_chat_template(
            row["messages"][:turn], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert row["prompt_ids"] == want, row["id"]
        assert row["prompt_text"].endswith("<|im_start|>assistant\n")


def test_a_tool_dataset_is_refused_clearly(smollm2, tmp_path):
    src = converted(tmp_path, "b3_xlam", rows=6)
    assert all(json.loads(x)["tools"] for x in src.read_text().splitlines())
    out = tmp_path / "b3.rendered.jsonl"
    res = invoke("render", "--model", smollm2, src, out)
    assert res.exit_code == 1, res.output
    assert "[tools_ignored]" in res.output and "Traceback" not in res.output
    assert not out.exists() or not out.read_text().strip()


def test_a_mixed_dataset_rejects_only_the_rows_with_tools(smollm2, tmp_path):
    chat = converted(tmp_path, "b6_math", rows=5)
    tools = converted(tmp_path, "b1_glaive", rows=6)
    rows = [json.loads(x) for x in chat.read_text().splitlines()]
    rows += [json.loads(x) for x in tools.read_text().splitlines()]
    with_tools = sum(1 for r in rows if r.get("tools"))
    assert 0 < with_tools < len(rows)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "mixed.rendered.jsonl"
    res = invoke("render", "--model", smollm2, mixed, out)
    # a template that ignores tools: the rows that carry tools are rejected (tools_ignored) and
    # counted, the rest render
    assert res.exit_code == 0, res.output
    done = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(done) == len(rows) - with_tools and not any(r.get("tools") for r in done)
    errors = [
        json.loads(x) for x in (tmp_path / "mixed.rendered.errors.jsonl").read_text().splitlines()
    ]
    assert len(errors) == with_tools and {e["reason"] for e in errors} == {"tools_ignored"}
