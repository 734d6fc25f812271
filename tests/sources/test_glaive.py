"""Glaive v2 conversion, expected rows written by hand from the dataset's format
(docs/formats.md)."""

import json

from eyas.records import Conversation, RowError
from eyas.sources import convert_rows

WEATHER = {
    "name": "get_weather",
    "description": "Get weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
EVENT = {
    "name": "create_event",
    "description": "Create an event",
    "parameters": {
        "type": "object",
        "properties": {"title": {"type": "string"}},
        "required": ["title"],
    },
}
SYSTEM = (
    "SYSTEM: You are a helpful assistant with access to the following functions. "
    "Use them if required -\n"
    + json.dumps(WEATHER, indent=4)
    + "\n\n"
    + json.dumps(EVENT, indent=4)
    + "\n"
)


def convert(row):
    (item,) = list(convert_rows([row], "glaive", "b1"))
    return item


def test_call_with_apostrophe_in_single_quoted_arguments():
    row = {
        "system": SYSTEM,
        "chat": "USER: Add my doctor's appointment\n\n\nASSISTANT: <functioncall> "
        '{"name": "create_event", "arguments": \'{"title": "Doctor\'s appointment"}\'} '
        '<|endoftext|>\n\n\nFUNCTION RESPONSE: {"status": "ok"}\n\n\n'
        "ASSISTANT: It is on your calendar. <|endoftext|>\n\n\n",
    }
    conv = convert(row)
    assert isinstance(conv, Conversation)
    assert conv.messages == [
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Add my doctor's appointment"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "functions.create_event:0",
                    "type": "function",
                    "function": {
                        "name": "create_event",
                        "arguments": '{"title": "Doctor\'s appointment"}',
                    },
                }
            ],
        },
        {
            "role": "tool",
            "content": '{"status": "ok"}',
            "tool_call_id": "functions.create_event:0",
            "name": "create_event",
        },
        {"role": "assistant", "content": "It is on your calendar."},
    ]
    assert conv.tools == [
        {"type": "function", "function": WEATHER},
        {"type": "function", "function": EVENT},
    ]
    assert conv.notes == ["2 tools extracted from system prompt"]
    assert conv.source == {"format": "glaive", "file": "", "row": 0}


def test_no_functions_row_keeps_system_text():
    row = {
        "system": "SYSTEM: You are a helpful assistant, with no access to external functions.\n\n",
        "chat": "USER: Hi\n\n\nASSISTANT: Hello! <|endoftext|>\n\n\n",
    }
    conv = convert(row)
    assert conv.tools == []
    assert conv.messages[0] == {
        "role": "system",
        "content": "You are a helpful assistant, with no access to external functions.",
    }
    assert conv.messages[-1] == {"role": "assistant", "content": "Hello!"}


def test_collapsed_whitespace_and_missing_endoftext_and_json_string_arguments():
    row = {
        "system": SYSTEM,
        "chat": 'USER: Weather in Rome?\nASSISTANT: <functioncall> {"name": "get_weather", '
        '"arguments": "{\\"city\\": \\"Rome\\"}"}\nFUNCTION RESPONSE: {"t": 20}\n'
        "ASSISTANT: 20 degrees",
    }
    conv = convert(row)
    assert [m["role"] for m in conv.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    call = conv.messages[2]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}
    assert conv.messages[4]["content"] == "20 degrees"


def test_call_ids_count_over_the_whole_conversation():
    turn = (
        'USER: Weather in {c}?\n\n\nASSISTANT: <functioncall> {{"name": "get_weather", '
        '"arguments": \'{{"city": "{c}"}}\'}} <|endoftext|>\n\n\nFUNCTION RESPONSE: {{}}\n\n\n'
        "ASSISTANT: Ok <|endoftext|>\n\n\n"
    )
    conv = convert({"system": SYSTEM, "chat": turn.format(c="Rome") + turn.format(c="Oslo")})
    ids = [m["tool_calls"][0]["id"] for m in conv.messages if m.get("tool_calls")]
    assert ids == ["functions.get_weather:0", "functions.get_weather:1"]
    results = [m["tool_call_id"] for m in conv.messages if m["role"] == "tool"]
    assert results == ids


def test_undeclared_function_is_kept_and_noted():
    row = {
        "system": SYSTEM,
        "chat": 'USER: x\n\n\nASSISTANT: <functioncall> {"name": "launch", '
        "\"arguments\": '{}'} <|endoftext|>",
    }
    conv = convert(row)
    assert conv.messages[2]["tool_calls"][0]["function"]["name"] == "launch"
    assert "call to undeclared function 'launch' kept" in conv.notes


def test_bad_rows_get_reason_codes():
    bad_call = {
        "system": SYSTEM,
        "chat": "USER: x\n\n\nASSISTANT: <functioncall> {\"arguments\": '{}'}",
    }
    bad_tools = {
        "system": "SYSTEM: You are a helpful assistant with access to the following "
        'functions. Use them if required -\n{"name": broken',
        "chat": "USER: x",
    }
    orphan = {"system": "", "chat": "USER: x\n\n\nFUNCTION RESPONSE: {}"}
    empty = {"system": "", "chat": ""}
    items = list(convert_rows([bad_call, bad_tools, orphan, empty, {"nope": 1}], "glaive", "b1"))
    assert all(isinstance(i, RowError) for i in items)
    assert [i.reason for i in items] == [
        "unparseable_tool_call",
        "unparseable_tools",
        "orphan_tool_result",
        "empty_conversation",
        "missing_field",
    ]
    assert [i.row for i in items] == [0, 1, 2, 3, 4]
