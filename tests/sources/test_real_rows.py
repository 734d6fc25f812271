"""Converters on real rows of each source (provenance in real_rows/README.md).

Expected structures were read off the rows by hand: tools, calls with their exact arguments,
linked results and the system text that remains.
"""

import json
from pathlib import Path

import pytest

from eyas.records import Conversation, RowError
from eyas.sources import convert_rows

ROWS = Path(__file__).parent / "real_rows"

# Phrases of tool boilerplate; none may survive in a converted system message.
BOILERPLATE = (
    "<tools>",
    "</tools>",
    "<tool_call>",
    "function signatures",
    "args-dict",
    "function-name",
    "following functions",
    "Use them if required",
    "pydantic model",
    "function name and arguments",
    "the following schema",
    "XML tags",
)


def rows(fmt: str) -> list[dict]:
    return [json.loads(line) for line in (ROWS / f"{fmt}.jsonl").read_text().splitlines()]


def convert(fmt: str, items: list[dict]) -> list[Conversation | RowError]:
    return list(convert_rows(items, fmt, fmt))


def arguments(call: dict) -> dict:
    return json.loads(call["function"]["arguments"])


@pytest.mark.parametrize("fmt", ["hermes", "glaive", "xlam", "sharegpt"])
def test_no_converted_system_message_keeps_tool_boilerplate(fmt):
    for conv in convert(fmt, rows(fmt)):
        if isinstance(conv, Conversation):
            for msg in conv.messages:
                if msg["role"] == "system":
                    assert not [p for p in BOILERPLATE if p in msg["content"]], msg["content"]


def test_hermes_tool_use_row():
    conv = convert("hermes", rows("hermes")[:1])[0]
    assert isinstance(conv, Conversation)
    # The func-calling template is the whole system prompt: nothing of it remains.
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "tool", "assistant"]
    (tool,) = conv.tools
    params = tool["function"]["parameters"]
    assert tool["function"]["name"] == "search_flights"
    assert params["required"] == [
        "departure_city",
        "destination_city",
        "departure_date",
        "return_date",
        "class",
    ]
    assert params["properties"]["class"]["enum"] == ["economy", "business", "first"]
    (call,) = conv.messages[1]["tool_calls"]
    assert call["function"]["name"] == "search_flights"
    assert arguments(call) == {
        "departure_city": "Los Angeles",
        "destination_city": "Auckland",
        "departure_date": "2023-07-10",
        "return_date": "2023-07-24",
        "class": "economy",
        "flexible_cancellation": True,
    }
    result = conv.messages[2]
    assert result["tool_call_id"] == call["id"] and result["name"] == "search_flights"
    assert json.loads(result["content"])["flights"][0]["flight_number"] == "AA118"
    assert conv.messages[3]["content"].startswith("Here are the available flight options")


def test_hermes_extraction_row_with_name_inside_arguments_is_refused():
    (err,) = convert("hermes", rows("hermes")[1:2])
    assert isinstance(err, RowError) and err.reason == "tool_call_name_in_arguments"


def test_hermes_extraction_template_is_removed_whole():
    # The extraction row up to its user turn (its call is refused above).
    row = dict(rows("hermes")[1])
    row["conversations"] = row["conversations"][:2]
    (conv,) = convert("hermes", [row])
    assert conv.messages[0]["role"] == "user"
    assert conv.messages[0]["content"].startswith("Can you help me extract queries")
    assert [t["function"]["name"] for t in conv.tools] == ["ExpertQAExtractor"]
    assert "1 tools extracted from the structured_extraction template" in conv.notes


def test_hermes_escaped_newline_call_is_recovered():
    # The recoverable shape of the extraction calls: "\\n" around the body, Python quotes
    # inside, `name` at the top level (quoted from another project's public test).
    body = '<tool_call>\\n{"arguments": {"queries": [\'How?\']}, "name": "ExpertQAExtractor"}\\n</tool_call>'
    row = dict(rows("hermes")[1])
    row["conversations"] = [*row["conversations"][:2], {"from": "gpt", "value": body}]
    (conv,) = convert("hermes", [row])
    (call,) = conv.messages[1]["tool_calls"]
    assert call["function"]["name"] == "ExpertQAExtractor"
    assert arguments(call) == {"queries": ["How?"]}
    assert conv.messages[1]["content"] == ""
    assert "tool call framed by escaped newlines recovered" in conv.notes


@pytest.mark.parametrize("index", [2, 3])
def test_hermes_json_mode_rows_keep_their_schema_prompt(index):
    row = rows("hermes")[index]
    (conv,) = convert("hermes", [row])
    assert conv.tools == []
    assert conv.messages[0] == {
        "role": "system",
        "content": row["conversations"][0]["value"].strip(),
    }
    assert json.loads(conv.messages[2]["content"]) == json.loads(row["conversations"][2]["value"])


def test_glaive_rows():
    no_call, call, no_tools = convert("glaive", rows("glaive"))
    # The persona before the tool lead-in is kept exactly: no full stop added.
    assert no_call.messages[0] == {"role": "system", "content": "You are a helpful assistant"}
    assert [t["function"]["name"] for t in no_call.tools] == ["get_exchange_rate"]
    assert no_call.tools[0]["function"]["parameters"]["required"] == [
        "base_currency",
        "target_currency",
    ]
    assert no_call.messages[2]["content"].endswith("feel free to ask!")

    assert [m["role"] for m in call.messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    (tool_call,) = call.messages[4]["tool_calls"]
    assert arguments(tool_call) == {"text": "Je suis un étudiant"}
    assert call.messages[5]["tool_call_id"] == tool_call["id"]
    assert call.messages[5]["content"] == '{"language": "French"}'
    assert call.messages[6]["content"] == "The text you provided is in French."

    assert no_tools.tools == []
    assert no_tools.messages[0] == {
        "role": "system",
        "content": "You are a helpful assistant, with no access to external functions.",
    }
    assert [m["content"] for m in no_tools.messages[1:]] == [
        "Assign this occupation to the appropriate category\nNurse",
        "Healthcare",
        "What about an electrician?",
        "Skilled Trades",
    ]


def test_glaive_system_with_two_functions_and_no_persona_text_after_them():
    # Row 2144's system field.
    lead_in = (
        "SYSTEM: You are a helpful assistant with access to the following functions. "
        "Use them if required -"
    )
    system = (
        lead_in
        + '\n{\n    "name": "get_random_joke",\n    "description": "Get a random joke",\n'
        + '    "parameters": {}\n}\n\n'
        + '{\n    "name": "get_random_fact",\n    "description": "Get a random fact",\n'
        + '    "parameters": {}\n}\n\n'
    )
    (conv,) = convert("glaive", [{"system": system, "chat": "USER: A joke?\n\n\n"}])
    assert [t["function"]["name"] for t in conv.tools] == ["get_random_joke", "get_random_fact"]
    assert conv.messages[0] == {"role": "system", "content": "You are a helpful assistant"}


def test_xlam_required_follows_the_optional_marker():
    giveaways, chain, split = convert("xlam", rows("xlam"))
    # A `default` (here an example value, or "") does not make a parameter optional.
    assert giveaways.tools[0]["function"]["parameters"]["required"] == ["type"]
    peers, details = (t["function"]["parameters"] for t in chain.tools)
    assert peers["required"] == ["symbol"] and "default" not in peers["properties"]["symbol"]
    assert details["required"] == ["chain_slug"]
    assert details["properties"]["chain_slug"]["default"] == "ethereum"
    assert [arguments(c) for c in giveaways.messages[1]["tool_calls"]] == [
        {"type": "beta"},
        {"type": "game"},
    ]
    assert [arguments(c) for c in chain.messages[1]["tool_calls"]] == [{"chain_slug": "ethereum"}]
    split_list, search = (t["function"]["parameters"] for t in split.tools)
    assert split_list["required"] == ["lst", "chunk_size"]
    assert search["properties"]["arr"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "The sorted list of integers.",
    }
    assert [arguments(c) for c in split.messages[1]["tool_calls"]] == [
        {"lst": [10, 20, 30, 40, 50, 60], "chunk_size": 4},
        {"arr": [10, 20, 30, 40, 50, 60], "target": 30},
    ]


def test_xlam_optional_marker_on_a_real_tool():
    # The t3ma tool of xLAM id 2, as printed; the row's answer calls it with three arguments.
    t3ma = json.loads(
        '{"name": "t3ma", "description": "Fetches the Triple Exponential Moving Average (T3MA) '
        'for a given financial instrument.", "parameters": {"symbol": {"description": '
        '"Instrument symbol, which can be any equity, index, ETF, forex, or cryptocurrency '
        '(e.g., \'AAPL\', \'EUR/USD\', \'ETH/BTC\').", "type": "str", "default": "AAPL"}, '
        '"interval": {"description": "Interval between two consecutive points in the time '
        "series. Supported intervals include '1min', '5min', '15min', '30min', '45min', '1h', "
        "'2h', '4h', '1day', '1week', and '1month'.\", \"type\": \"str\", \"default\": \"1min\"}, "
        '"format": {"description": "Format of the response data, either \'CSV\' or \'JSON\'. '
        'Default is \'json\'.", "type": "str, optional", "default": "json"}, "v_factor": '
        '{"description": "Volume factor used in the calculation of the T3MA.", "type": "int, '
        'optional", "default": 0.7}, "series_type": {"description": "Type of series to use in '
        "the calculation. Supported values are 'open', 'high', 'low', and 'close'. Default is "
        '\'close\'.", "type": "str, optional", "default": "close"}, "outputsize": '
        '{"description": "Number of data points to return. Default is 30.", "type": "int, '
        'optional", "default": 30}, "time_period": {"description": "Number of periods over '
        'which to calculate the T3MA. Default is 9.", "type": "int, optional", "default": 9}}}'
    )
    answers = [
        {"name": "t3ma", "arguments": {"symbol": "ETH/BTC", "interval": "1h", "time_period": 14}}
    ]
    row = {
        "query": "What is the T3MA for 'ETH/BTC' using a 1h interval and a time period of 14?",
        "tools": json.dumps([t3ma]),
        "answers": json.dumps(answers),
    }
    (conv,) = convert("xlam", [row])
    params = conv.tools[0]["function"]["parameters"]
    assert params["required"] == ["symbol", "interval"]
    assert params["properties"]["format"] == {
        "type": "string",
        "description": "Format of the response data, either 'CSV' or 'JSON'. Default is 'json'.",
        "default": "json",
    }
    assert params["properties"]["time_period"]["type"] == "integer"


def test_sharegpt_row():
    (conv,) = convert("sharegpt", rows("sharegpt"))
    assert [m["role"] for m in conv.messages] == ["user", "assistant"] * 3
    assert (
        conv.messages[0]["content"]
        == 'Why does `dir` command in DOS see the "<.<" argument as "\\*.\\*"?'
    )
    assert conv.notes == []
