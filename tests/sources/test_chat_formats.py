"""ShareGPT, UltraChat and OpenAI conversion, detection, and input file kinds."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eyas.records import Conversation, RowError
from eyas.sources import convert_rows, detect_format, read_rows
from eyas.sources.run import convert_file


def one(fmt, row):
    (item,) = list(convert_rows([row], fmt, "d"))
    return item


def test_sharegpt_system_function_call_and_observation():
    row = {
        "system": "Be brief.",
        "tools": json.dumps([{"name": "f", "parameters": {}}]),
        "conversations": [
            {"from": "human", "value": "Do it"},
            {"from": "function_call", "value": '{"name": "f", "arguments": {"a": 1}}'},
            {"from": "observation", "value": "done"},
            {"from": "gpt", "value": "Done."},
        ],
    }
    conv = one("sharegpt", row)
    assert [m["role"] for m in conv.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert conv.messages[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert conv.messages[3]["tool_call_id"] == "functions.f:0"
    assert conv.tools[0]["function"]["parameters"] == {}


def test_sharegpt_role_content_variant_and_unknown_role():
    conv = one(
        "sharegpt",
        {
            "conversations": [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
            ]
        },
    )
    assert conv.messages == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
    ]
    err = one("sharegpt", {"conversations": [{"from": "robot", "value": "x"}]})
    assert isinstance(err, RowError) and err.reason == "unknown_role"


def sharegpt(*turns):
    return {"conversations": [{"from": who, "value": text} for who, text in turns]}


def test_sharegpt_role_order_anomalies_are_never_silent():
    # Constructed: no public copy reachable here prints such a row (see real_rows/README.md).
    no_user = one("sharegpt", sharegpt(("gpt", "Hello! How can I help?")))
    assert isinstance(no_user, RowError) and no_user.reason == "no_user_turn"

    leading = one(
        "sharegpt",
        sharegpt(("gpt", "...and that is part one."), ("human", "Go on"), ("gpt", "Part two.")),
    )
    assert [m["content"] for m in leading.messages] == ["Go on", "Part two."]
    assert leading.notes == ["1 assistant turn(s) before the first user turn dropped"]

    repeated = one(
        "sharegpt",
        sharegpt(
            ("system", "Be brief."),
            ("human", "a"),
            ("human", "b"),
            ("gpt", "c"),
            ("gpt", "d"),
            ("human", "e"),
        ),
    )
    assert repeated.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\n\nb"},
        {"role": "assistant", "content": "c\n\nd"},
        {"role": "user", "content": "e"},
    ]
    assert repeated.notes == ["consecutive user turns joined", "consecutive assistant turns joined"]

    well_formed = one("sharegpt", sharegpt(("human", "a"), ("gpt", "b")))
    assert well_formed.notes == []


def test_ultrachat_both_shapes():
    a = one(
        "ultrachat",
        {
            "prompt": "q",
            "prompt_id": "1",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        },
    )
    b = one("ultrachat", {"id": "0", "data": ["q", "a", "q2"]})
    assert a.messages == [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    assert [m["role"] for m in b.messages] == ["user", "assistant", "user"]


def test_openai_keeps_reasoning_ids_and_encodes_dict_arguments():
    row = {
        "messages": [
            {"role": "user", "content": "x", "name": "alice"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "think",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"k": "é"}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "r"},
            {"role": "assistant", "content": "ok", "reasoning_content": None},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    }
    conv = one("openai", row)
    assert conv.messages[0] == {"role": "user", "content": "x", "name": "alice"}
    assert conv.messages[1]["reasoning_content"] == "think"
    assert conv.messages[1]["tool_calls"][0] == {
        "id": "call_9",
        "type": "function",
        "function": {"name": "f", "arguments": '{"k": "é"}'},
    }
    assert conv.messages[2] == {
        "role": "tool",
        "content": "r",
        "tool_call_id": "call_9",
        "name": "f",
    }
    assert "reasoning_content" not in conv.messages[3]


def test_openai_legacy_function_call():
    conv = one(
        "openai",
        {
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "f", "arguments": "{}"},
                },
                {"role": "function", "name": "f", "content": "1"},
            ]
        },
    )
    assert conv.messages[1]["tool_calls"][0]["id"] == "functions.f:0"
    assert conv.messages[2]["tool_call_id"] == "functions.f:0"
    assert "1 legacy" in conv.notes[0] or "2 legacy" in conv.notes[0]


def test_ids_are_stable_and_depend_on_dataset():
    row = {"messages": [{"role": "user", "content": "x"}]}
    a, b = one("openai", row), one("openai", dict(row))
    (c,) = list(convert_rows([row], "openai", "other"))
    assert a.id == b.id != c.id


@pytest.mark.parametrize(
    "rows,fmt",
    [
        ([{"system": "", "chat": "USER: x"}], "glaive"),
        ([{"query": "x", "tools": "[]", "answers": "[]"}], "xlam"),
        ([{"conversations": [{"from": "human", "value": "<tool_call>x</tool_call>"}]}], "hermes"),
        ([{"conversations": [{"from": "human", "value": "hi"}]}], "sharegpt"),
        ([{"prompt": "x", "prompt_id": "1", "messages": []}], "ultrachat"),
        ([{"messages": [{"role": "user", "content": "x"}]}], "openai"),
    ],
)
def test_detect_format(rows, fmt):
    assert detect_format(rows) == fmt


def test_input_kinds_jsonl_json_parquet_and_save_to_disk(tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]}
        for i in range(3)
    ]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    (tmp_path / "b.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    import datasets

    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "d"))
    for name in ("a.jsonl", "b.json", "c.parquet", "d"):
        items = list(read_rows(tmp_path / name))
        convs = [i for i in items if isinstance(i, dict)]
        assert [c["messages"][0]["content"] for c in convs] == ["q0", "q1", "q2"], name
    result = convert_file(tmp_path / "a.jsonl", tmp_path / "out.jsonl", "auto", "d")
    assert (result.format, result.detected, result.num_converted) == ("openai", True, 3)
    assert dict(result.reasons) == {"invalid_json": 1}
    errors = [json.loads(x) for x in (tmp_path / "out.errors.jsonl").read_text().splitlines()]
    assert errors == [{"row": 3, "reason": "invalid_json", "detail": errors[0]["detail"]}]
    out = [
        Conversation.from_dict(json.loads(x))
        for x in (tmp_path / "out.jsonl").read_text().splitlines()
    ]
    assert set(json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])) == {
        "id",
        "dataset",
        "messages",
        "tools",
        "source",
        "notes",
    }
    assert out[0].source == {"format": "openai", "file": str(tmp_path / "a.jsonl"), "row": 0}
