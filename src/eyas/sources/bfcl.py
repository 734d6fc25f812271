"""BFCL v4 (the `bfcl-eval` package, `bfcl_eval/data/BFCL_v4_<category>.json`, JSON lines).

Rows: `{"id", "question": [[turn 1 messages], [turn 2 messages], ...], "function": [docs]}`;
multi-turn and agentic rows name `involved_classes` instead, whose docs live in
`multi_turn_func_doc/` beside the category files (joined by `with_side_files` when a file is
converted where it lies). Possible answers live in `possible_answer/` and are not needed: the
model's answer is what eyas regenerates.

Tools are declared the way BFCL sends them to a native function-calling model (its OpenAI
completions handler, which Kimi's and GLM's handlers use), so the target's template declares
them natively (Kimi-K2.5: the TypeScript `tool_declare` turn) and not in BFCL's own types:
1. `utils.add_language_specific_hint_to_function_doc`: the description gains BFCL's syntax
   hint (Python 3, Java 8 SDK or JavaScript), and Java and JavaScript parameters become
   strings whose description names the original type;
2. `model_handler/utils.py` `convert_to_tool(..., GORILLA_TO_OPENAPI, OPENAI_COMPLETIONS)`:
   `.` in a function name becomes `_`, the root `dict` becomes `object`, and every parameter
   type is cast by `constants/type_mappings.py` `GORILLA_TO_OPENAPI` (`dict` -> object,
   `float` -> number with `format: float` and " This is a float type value." appended to the
   description, `tuple` -> array, `any` -> string, Java/JS types, unknown or missing ->
   string), recursing into properties and items as `_cast_to_openai_type` does.
Every mapping is a note on the row (docs/formats.md, "BFCL").

Turns: each BFCL turn after the first follows the model's own answer to the one before (an
unanswered assistant turn, as in MT-Bench). Not converted, each with a stable reason:
`memory` rows (`bfcl_runtime_state`: their system prompt carries the memory backend's core
memory, which BFCL fills by running the model on prerequisite sessions) and rows whose docs
are missing (`missing_function_docs`). `multi_turn_miss_func` rows stop before the turn that
adds the held-out function (one conversation has one tool list), with a note.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from eyas.jsonl import read_jsonl
from eyas.sources.common import ConversionError, Draft
from eyas.tools.schema import ToolParseError, as_openai_tool

# bfcl_eval/constants/type_mappings.py GORILLA_TO_OPENAPI (bfcl-eval 2026.3.23)
GORILLA_TO_OPENAPI = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
    "ArrayList": "array",
    "Array": "array",
    "HashMap": "object",
    "Hashtable": "object",
    "Queue": "array",
    "Stack": "array",
    "Any": "string",
    "String": "string",
    "Bigint": "integer",
}
# bfcl_eval/constants/executable_backend_config.py MULTI_TURN_FUNC_DOC_FILE_MAPPING
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
    "WebSearchAPI": "web_search.json",
    "MemoryAPI_kv": "memory_kv.json",
    "MemoryAPI_vector": "memory_vector.json",
    "MemoryAPI_rec_sum": "memory_rec_sum.json",
}
# bfcl_eval/constants/default_prompts.py ADDITIONAL_SYSTEM_PROMPT_FOR_AGENTIC_RESPONSE_FORMAT,
# the system turn `utils.process_agentic_test_case` puts before web-search questions
AGENTIC_SYSTEM_PROMPT = (
    "For your final answer to the user, you must respond in this format: {'answer': A short "
    "and precise answer to the question, 'context': A brief explanation of how you arrived at "
    "this answer or why it is correct}. If you do not know the answer, respond with {'answer': "
    "'I do not know', 'context': 'I do not know'}. If you think the question cannot be properly "
    "answered, response with {'answer': 'I cannot answer this question', 'context': A short "
    "reason explaining why this question cannot be answered}.\n"
)
_FLOAT_SUFFIX = " This is a float type value."  # model_handler/utils.py _cast_to_openai_type
_HINTS = {  # utils.py _get_language_specific_hint
    "java": " Note that the provided function is in Java 8 SDK syntax.",
    "javascript": " Note that the provided function is in JavaScript syntax.",
    "python": " Note that the provided function is in Python 3 syntax.",
}


def category_of(entry_id: str) -> str:
    """`simple_python_12` -> `simple_python`; `live_simple_19-3-15` -> `live_simple`."""
    return entry_id.split(":")[0].rsplit("_", 1)[0]


def _language(category: str) -> str:
    if category.endswith("java"):
        return "java"
    if category.endswith("javascript"):
        return "javascript"
    return "python"


# -- side files --------------------------------------------------------------------------------


def _load_docs(folder: Path, name: str, cache: dict[str, list[dict] | None]) -> list[dict] | None:
    if name not in cache:
        path = folder / FUNC_DOC_FILES.get(name, f"{name}.json")
        cache[name] = list(read_jsonl(path)) if path.is_file() else None
    return cache[name]


def with_side_files(rows: Iterable, path: Path) -> Iterator:
    """Attach the classes' function docs to rows that name `involved_classes` (BFCL's
    `populate_test_cases_with_predefined_functions`), from `multi_turn_func_doc/` beside
    `path`. Rows whose docs are not found pass unchanged (the converter rejects them)."""
    folder = path.parent / "multi_turn_func_doc"
    cache: dict[str, list[dict] | None] = {}
    for row in rows:
        if isinstance(row, dict) and "function" not in row and row.get("involved_classes"):
            docs = [_load_docs(folder, c, cache) for c in row["involved_classes"]]
            if all(d is not None for d in docs):
                row = {**row, "function": [copy.deepcopy(f) for d in docs for f in d]}
        yield row


# -- types -------------------------------------------------------------------------------------


def _language_params(fn: dict, language: str, mapped: Counter) -> None:
    """BFCL's `_func_doc_language_specific_pre_processing` for Java and JavaScript: top-level
    parameters become strings; the description says what they were."""
    lang = "Java" if language == "java" else "JavaScript"
    listy = ("ArrayList", "Array") if language == "java" else ("array",)
    for value in fn["parameters"].get("properties", {}).values():
        kind = value.get("type")
        desc = value.get("description", "")
        if kind == "any":
            desc += f" This parameter can be of any type of {lang} object in string representation."
        else:
            desc += f" This is {lang} {kind} type parameter in string representation."
        if kind in listy and "items" in value:
            inner = value["items"].get("type")
            desc += (
                f" The list elements are of type {inner}; they are not in string representation."
            )
            del value["items"]
        if language == "javascript" and kind == "dict" and "properties" in value:
            desc += (
                " The dictionary entries have the following schema; they are not in string "
                f"representation. {json.dumps(value['properties'])}"
            )
            del value["properties"]
        value["description"] = desc
        value["type"] = "string"
        mapped[(f"{lang} {kind}", "string")] += 1


def _map_type(kind: object, mapped: Counter) -> str:
    target = GORILLA_TO_OPENAPI.get(kind, "string") if isinstance(kind, str) else "string"
    if kind != target:
        mapped[(str(kind) if kind not in (None, "") else "missing", target)] += 1
    return target


def _cast(properties: dict, mapped: Counter) -> dict:
    """`_cast_to_openai_type`: the same rules, for every property and nested item."""
    for value in properties.values():
        if not isinstance(value, dict):
            raise ConversionError("unparseable_tools", f"property is not an object: {value!r:.60}")
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + _FLOAT_SUFFIX
        value["type"] = _map_type(kind, mapped)
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast(value["properties"], mapped)
            elif isinstance(value.get("items"), dict):
                items = value["items"]
                items["type"] = _map_type(items.get("type"), mapped)
                if items["type"] == "array" and isinstance(items.get("items"), dict):
                    items["items"]["type"] = _map_type(items["items"].get("type"), mapped)
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast(items["properties"], mapped)
    return properties


def bfcl_tool(fn: dict, category: str, notes: Counter) -> dict:
    """One BFCL function doc as the OpenAI tool BFCL's FC handler sends; counts what changed."""
    if not isinstance(fn, dict) or not isinstance(fn.get("parameters"), dict):
        raise ConversionError("unparseable_tools", f"function doc without parameters: {fn!r:.80}")
    fn = copy.deepcopy(fn)
    language = _language(category)
    fn["description"] = fn.get("description", "") + _HINTS[language]
    notes[f"BFCL {language} syntax hint appended to the function description"] += 1
    mapped: Counter = Counter()
    if language != "python":
        _language_params(fn, language, mapped)
    if "." in fn.get("name", ""):
        fn["name"] = fn["name"].replace(".", "_")
        notes["function name: '.' replaced by '_' as BFCL's OpenAI FC handler sends it"] += 1
    params = fn["parameters"]
    root = params.get("type")
    params["type"] = "object"
    if root != "object":
        mapped[(str(root), "object")] += 1
    params["properties"] = _cast(params.get("properties") or {}, mapped)
    if "response" in fn:
        notes["return schema (`response`) not declared: templates declare parameters"] += 1
    for (src, dst), n in mapped.items():
        extra = " (format float, BFCL's description suffix)" if src == "float" else ""
        notes[f"BFCL type `{src}` declared as JSON Schema `{dst}`{extra}"] += n
    try:
        return as_openai_tool(fn)
    except ToolParseError as exc:
        raise ConversionError.wrap(exc) from exc


# -- rows --------------------------------------------------------------------------------------


def _add_turn(draft: Draft, turn: object, k: int) -> None:
    if not isinstance(turn, list):
        raise ConversionError("bad_content", f"question[{k}] is not a list of messages")
    for j, msg in enumerate(turn):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role not in ("system", "user", "assistant"):
            raise ConversionError("unknown_role", f"question[{k}][{j}].role={role!r}")
        if not isinstance(msg.get("content"), str):
            raise ConversionError("bad_content", f"question[{k}][{j}] has no string content")
        draft.add(role, msg["content"])


def convert(row: dict) -> Draft:
    entry_id = row.get("id")
    question = row.get("question")
    if not isinstance(entry_id, str) or not isinstance(question, list) or not question:
        raise ConversionError("missing_field", "BFCL rows need an `id` and a `question` list")
    category = category_of(entry_id)
    if category == "memory":
        raise ConversionError(
            "bfcl_runtime_state",
            "the memory prompt carries the memory backend's core memory, which BFCL fills by "
            "running the model on its prerequisite sessions; eyas does not run BFCL's backends",
        )
    functions = row.get("function")
    if functions is None:
        raise ConversionError(
            "missing_function_docs",
            f"{entry_id} names its classes ({row.get('involved_classes')}); convert the file "
            "where it lies in bfcl_eval/data/ so that multi_turn_func_doc/ is found",
        )
    if not isinstance(functions, list):
        raise ConversionError("unparseable_tools", "`function` is not a list")
    missed = row.get("missed_function") or {}
    held_out = {n if isinstance(n, str) else n.get("name") for v in missed.values() for n in v}
    counts: Counter = Counter()
    draft = Draft()
    draft.tools = [
        bfcl_tool(fn, category, counts) for fn in functions if fn.get("name") not in held_out
    ]
    draft.notes.extend(f"{n} {text}" for text, n in counts.items())
    if category.startswith("web_search"):
        draft.add("system", AGENTIC_SYSTEM_PROMPT)
        draft.notes.append("BFCL's agentic answer-format system prompt added")
    stop = min((int(k) for k in missed), default=len(question))
    for k, turn in enumerate(question[:stop]):
        if k:
            draft.add("assistant", None)  # the model's own answer to turn k-1
        _add_turn(draft, turn, k)
    if stop < len(question):
        draft.notes.append(
            f"kept turns 1-{stop} of {len(question)}: turn {stop + 1} adds the held-out "
            f"function(s) {sorted(held_out)}, and one conversation has one tool list"
        )
    if len(question[:stop]) > 1:
        draft.notes.append(
            f"{len(question[:stop])} BFCL turns, each after the model's own answer (a tool call "
            "there ends the conversation: its results come from BFCL's executable backends)"
        )
    if not any(m["role"] == "user" for m in draft.messages):
        raise ConversionError("no_user_turn", "the question has no user turn")
    return draft
