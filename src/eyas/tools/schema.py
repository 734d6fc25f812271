"""Normalise tool definitions and calls to the OpenAI shape eyas carries end to end."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from eyas.errors import EyasError


class ToolParseError(EyasError):
    """A tool definition or call could not be parsed; `reason` is a stable code."""


def deep_sort(obj: Any) -> Any:
    """Sort dict keys at every level, keep list order (what Kimi's tokenizer does to `tools`)."""
    if isinstance(obj, dict):
        return {k: deep_sort(obj[k]) for k in sorted(obj)}
    if isinstance(obj, list):
        return [deep_sort(v) for v in obj]
    return obj


def parse_loose_json(text: str) -> Any:
    """Parse JSON, falling back to a Python literal (Hermes/ShareGPT rows use Python reprs)."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise ToolParseError(
            "invalid_json", f"neither JSON nor a Python literal: {text[:80]!r}"
        ) from exc


def as_openai_tool(obj: Any) -> dict:
    """Accept `{"type":"function","function":{...}}` or a bare `{"name",...}` function object."""
    if not isinstance(obj, dict):
        raise ToolParseError("unparseable_tools", f"tool is {type(obj).__name__}, not an object")
    fn = obj.get("function") if obj.get("type") == "function" or "function" in obj else obj
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"].strip():
        raise ToolParseError("unparseable_tools", f"tool has no function name: {str(obj)[:80]}")
    out: dict[str, Any] = {"name": fn["name"].strip()}
    if fn.get("description"):
        out["description"] = fn["description"]
    params = fn.get("parameters")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise ToolParseError("unparseable_tools", f"{out['name']}: parameters is not an object")
    out["parameters"] = params
    return {"type": "function", "function": out}


def declared_names(tools: list[dict]) -> set[str]:
    return {t["function"]["name"] for t in tools if t.get("type") == "function"}


def make_tool_call(name: str, arguments: Any, call_id: str) -> dict:
    """An OpenAI tool call; arguments become a JSON string (non-ASCII kept, as models emit it)."""
    if isinstance(arguments, str):
        args = arguments
    else:
        args = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


_PY_TYPES = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "dict": "object",
    "object": "object",
    "any": None,
    "list": "array",
    "array": "array",
    "tuple": "array",
    "set": "array",
}
_GENERIC = re.compile(r"^(List|list|Tuple|tuple|Set|set|Sequence)\[(.*)\]$")
_DICT_GENERIC = re.compile(r"^(Dict|dict|Mapping)\[.*\]$")
_OPTIONAL = re.compile(r"^Optional\[(.*)\]$")
_UNION = re.compile(r"^Union\[(.*)\]$")


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def python_type_to_schema(type_str: str) -> dict:
    """Map an xLAM Python-ish type name ('List[int]', 'Dict[str, Any]') to JSON Schema."""
    t = type_str.strip()
    if m := _OPTIONAL.match(t):
        return python_type_to_schema(m.group(1))
    if m := _UNION.match(t):
        members = [python_type_to_schema(p) for p in _split_top(m.group(1))]
        return {"anyOf": members}
    if m := _GENERIC.match(t):
        inner = _split_top(m.group(2))
        items = python_type_to_schema(inner[0]) if inner else {}
        return {"type": "array", "items": items}
    if _DICT_GENERIC.match(t):
        return {"type": "object"}
    mapped = _PY_TYPES.get(t.lower())
    if mapped is None:
        # "Any" or an unknown name: no constraint (TS encoder prints `any`).
        return {} if t.lower() == "any" else {"type": t}
    return {"type": mapped}


_XLAM_OPTIONAL = re.compile(r",\s*optional\s*$", re.IGNORECASE)


def xlam_parameters_to_schema(params: dict) -> dict:
    """xLAM `{name: {type, description, default?}}` -> JSON Schema object with `required`.

    A parameter is optional only when its type says so (`"str, optional"`), as the dataset
    card's examples do; a `default` is kept as the schema default but does not make it optional.
    """
    if not isinstance(params, dict):
        raise ToolParseError("unparseable_tools", "xLAM parameters is not an object")
    if params.get("type") == "object" and isinstance(params.get("properties"), dict):
        return params  # already JSON Schema
    properties: dict[str, dict] = {}
    required: list[str] = []
    for name, spec in params.items():
        if not isinstance(spec, dict):
            raise ToolParseError("unparseable_tools", f"xLAM parameter {name!r} is not an object")
        raw_type = str(spec.get("type", "any"))
        marker = _XLAM_OPTIONAL.search(raw_type)
        optional = marker is not None
        if marker:
            raw_type = raw_type[: marker.start()]
        prop = python_type_to_schema(raw_type)
        if spec.get("description"):
            prop["description"] = spec["description"]
        # `default` is usually an example value or "" and says nothing about optionality:
        # the dataset marks optional parameters in the type string only.
        if spec.get("default") not in ("", None):
            prop["default"] = spec["default"]
        properties[name] = prop
        if not optional:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema
