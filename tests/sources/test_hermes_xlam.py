"""Hermes and xLAM conversion, expected rows written by hand from the datasets' formats
(docs/formats.md)."""

import json

from eyas.records import RowError
from eyas.sources import convert_rows

# The Hermes 2 Pro model-card prompt (one of hermes.TEMPLATES) followed by a persona.
HERMES_SYSTEM = (
    "You are a function calling AI model. You are provided with function signatures within "
    "<tools></tools> XML tags. You may call one or more functions to assist with the user "
    "query. Don't make assumptions about what values to plug into functions. Here are the "
    "available tools: <tools> {'type': 'function', 'function': {'name': 'get_stock_price', "
    "'description': 'Get a price', 'parameters': {'type': 'object', 'properties': "
    "{'symbol': {'type': 'string'}}, 'required': ['symbol']}}} </tools> Use the following "
    "pydantic model json schema for each tool call you will make: {'title': 'FunctionCall', "
    "'type': 'object', 'properties': {'arguments': {'title': 'Arguments', 'type': 'object'}, "
    "'name': {'title': 'Name', 'type': 'string'}}, 'required': ['arguments', 'name']} For each "
    "function call return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags as follows:\n<tool_call>\n{'arguments': <args-dict>, "
    "'name': <function-name>}\n</tool_call>\nYou speak like a pirate."
)


def one(fmt, row):
    (item,) = list(convert_rows([row], fmt, "d"))
    return item


def test_hermes_python_repr_tools_calls_and_responses():
    row = {
        "conversations": [
            {"from": "system", "value": HERMES_SYSTEM},
            {"from": "human", "value": "Price of IBM and NVDA?"},
            {
                "from": "gpt",
                "value": "<tool_call>\n{'arguments': {'symbol': 'IBM'}, 'name': "
                '\'get_stock_price\'}\n</tool_call>\n<tool_call>\n{"arguments": {"symbol": "NVDA"}, '
                '"name": "get_stock_price"}\n</tool_call>',
            },
            {
                "from": "tool",
                "value": '<tool_response>\n{"name": "get_stock_price", "content": '
                "{\"price\": 1}}\n</tool_response>\n<tool_response>\n{'name': 'get_stock_price', "
                "'content': {'price': 2}}\n</tool_response>",
            },
            {"from": "gpt", "value": "IBM is 1 and NVDA is 2."},
        ]
    }
    conv = one("hermes", row)
    assert conv.tools == [
        {
            "type": "function",
            "function": {
                "name": "get_stock_price",
                "description": "Get a price",
                "parameters": {
                    "type": "object",
                    "properties": {"symbol": {"type": "string"}},
                    "required": ["symbol"],
                },
            },
        }
    ]
    assert conv.messages[0] == {"role": "system", "content": "You speak like a pirate."}
    calls = conv.messages[2]["tool_calls"]
    assert [c["id"] for c in calls] == [
        "functions.get_stock_price:0",
        "functions.get_stock_price:1",
    ]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        {"symbol": "IBM"},
        {"symbol": "NVDA"},
    ]
    assert conv.messages[3] == {
        "role": "tool",
        "content": '{"price": 1}',
        "tool_call_id": "functions.get_stock_price:0",
        "name": "get_stock_price",
    }
    assert conv.messages[4]["tool_call_id"] == "functions.get_stock_price:1"
    assert conv.messages[4]["content"] == '{"price": 2}'
    assert "<tools>" not in json.dumps(conv.messages)


def test_hermes_prompt_matching_no_template_is_kept_whole_with_its_tools_declared():
    # The 2-Pro wording with its pydantic sentence missing: not a known template, so no
    # sentence is cut out of it; the tools are still declared for the calls.
    system = HERMES_SYSTEM.replace(
        HERMES_SYSTEM[HERMES_SYSTEM.index(" Use the following") : HERMES_SYSTEM.index(" For each")],
        "",
    )
    row = {"conversations": [{"from": "system", "value": system}, {"from": "human", "value": "Hi"}]}
    conv = one("hermes", row)
    assert conv.messages[0] == {"role": "system", "content": system}
    assert [t["function"]["name"] for t in conv.tools] == ["get_stock_price"]
    assert any("matches no known Hermes template" in n for n in conv.notes)


def test_hermes_bad_call_and_unknown_role():
    bad = {
        "conversations": [
            {"from": "human", "value": "x"},
            {"from": "gpt", "value": "<tool_call>\n{not valid\n</tool_call>"},
        ]
    }
    unknown = {"conversations": [{"from": "narrator", "value": "x"}]}
    items = list(convert_rows([bad, unknown], "hermes", "d"))
    assert [(type(i), i.reason) for i in items] == [
        (RowError, "unparseable_tool_call"),
        (RowError, "unknown_role"),
    ]


def test_xlam_types_optional_marker_and_parallel_calls():
    tools = [
        {
            "name": "weather",
            "description": "Weather",
            "parameters": {
                "city": {"description": "City", "type": "str"},
                "days": {"description": "Days", "type": "int, optional", "default": 3},
                "ids": {"description": "Ids", "type": "List[int]"},
                "opts": {"description": "Options", "type": "Dict[str, Any]", "default": ""},
                "ratio": {"description": "Ratio", "type": "float, optional"},
                "flag": {"description": "Flag", "type": "bool"},
            },
        }
    ]
    answers = [
        {"name": "weather", "arguments": {"city": "Rome", "ids": [1]}},
        {"name": "weather", "arguments": {"city": "Oslo", "ids": [2]}},
    ]
    conv = one(
        "xlam",
        {"id": 7, "query": "Weather?", "tools": json.dumps(tools), "answers": json.dumps(answers)},
    )
    params = conv.tools[0]["function"]["parameters"]
    assert params == {
        "type": "object",
        # Only the ", optional" marker makes a parameter optional; opts has a default ("")
        # but no marker, so it stays required.
        "required": ["city", "ids", "opts", "flag"],
        "properties": {
            "city": {"type": "string", "description": "City"},
            "days": {"type": "integer", "description": "Days", "default": 3},
            "ids": {"type": "array", "items": {"type": "integer"}, "description": "Ids"},
            "opts": {"type": "object", "description": "Options"},
            "ratio": {"type": "number", "description": "Ratio"},
            "flag": {"type": "boolean", "description": "Flag"},
        },
    }
    assert [c["id"] for c in conv.messages[1]["tool_calls"]] == [
        "functions.weather:0",
        "functions.weather:1",
    ]
    assert "2 parallel calls" in conv.notes


def test_xlam_irrelevant_query_and_bad_json():
    conv = one("xlam", {"query": "Hi", "tools": "[]", "answers": "[]"})
    assert conv.messages == [{"role": "user", "content": "Hi"}]
    bad = one("xlam", {"query": "Hi", "tools": "[{", "answers": "[]"})
    assert isinstance(bad, RowError) and bad.reason == "unparseable_tools"
