"""Salesforce/xlam-function-calling-60k (docs/formats.md).

Rows: `query` (str), `tools` and `answers` as JSON strings. Tool parameters are not JSON
Schema: `{name: {type: "List[int]", description, default?}}`, optional ones marked
`", optional"`. `answers` lists parallel calls; `"[]"` means the query needs no tool.
"""

from __future__ import annotations

import json

from eyas.sources.common import ConversionError, Draft
from eyas.tools.schema import ToolParseError, as_openai_tool, xlam_parameters_to_schema


def _json_field(row: dict, key: str, reason: str) -> list:
    value = row.get(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConversionError(reason, f"`{key}` is not JSON: {exc}") from exc
    if not isinstance(value, list):
        raise ConversionError(reason, f"`{key}` is not a list")
    return value


def convert(row: dict) -> Draft:
    query = row.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ConversionError("missing_field", "xLAM rows need a non-empty `query`")
    draft = Draft()
    for spec in _json_field(row, "tools", "unparseable_tools"):
        if not isinstance(spec, dict):
            raise ConversionError("unparseable_tools", "tool entry is not an object")
        fn = dict(spec)
        try:
            fn["parameters"] = xlam_parameters_to_schema(spec.get("parameters") or {})
            draft.tools.append(as_openai_tool(fn))
        except ToolParseError as exc:
            raise ConversionError.wrap(exc) from exc
    draft.notes.append(f"{len(draft.tools)} xLAM tools converted to JSON Schema")
    draft.add("user", query)
    answers = _json_field(row, "answers", "unparseable_tool_call")
    calls = []
    for answer in answers:
        if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
            raise ConversionError("unparseable_tool_call", f"answer without name: {answer!r:.80}")
        calls.append((answer["name"], answer.get("arguments") or {}))
    if calls:
        draft.add_calls(calls)
        if len(calls) > 1:
            draft.notes.append(f"{len(calls)} parallel calls")
    else:
        draft.notes.append("no reference answer: query needs no tool")
    return draft
