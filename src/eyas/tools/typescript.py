"""Kimi-K2.5 `tools_ts_str`: tool schemas as TypeScript declarations (formats.md §2.9).

The K2.5 tokenizer's `apply_chat_template` deep-sorts `tools` and passes this string to the
template, which puts it in the `tool_declare` turn. Rules, in brief:
- whole string: `# Tools\\n\\n## functions\\nnamespace functions {\\n` + functions joined by
  `\\n` + `\\n}\\n`; no function tools -> "".
- per function: `// description` lines, then `type NAME = (_: PARAMS) => any;`; `$defs` become
  `interface X {...}` blocks placed before the description.
- objects: required fields first, then optional (`name?:`), each group sorted by name; two
  spaces of indent per level.
- comments above a field: description, one constraints line (`key: value`, sorted),
  `// Default: ...` (JSON for str/objects, Python repr for numbers and booleans).
- integer -> number; enum -> union of literals; list `type` -> union; anyOf -> ` | `;
  `{}`/true -> any; false -> null; missing array items -> Array<any>.
"""

from __future__ import annotations

import json
from typing import Any

from eyas.tools.schema import deep_sort

_INDENT = "  "
_CONSTRAINT_KEYS = {
    "string": ("maxLength", "minLength", "pattern"),
    "number": ("maximum", "minimum"),
    "integer": ("maximum", "minimum"),
    "array": ("maxItems", "minItems"),
}
_UNION_NAMES = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "boolean": "boolean",
    "null": "null",
    "object": "{}",
    "array": "Array<any>",
}


class _Defs:
    """`$defs` seen while encoding one function, and whether `$ref: "#"` was used."""

    def __init__(self) -> None:
        self.definitions: dict[str, Any] = {}
        self.self_ref = False

    def ref_name(self, ref: str) -> str:
        if ref == "#":
            self.self_ref = True
            return "parameters"
        if ref.startswith("#/$defs/"):
            name = ref.split("/")[-1]
            if name not in self.definitions:
                raise ValueError(f"reference not found: {ref}")
            return name
        raise ValueError(f"unsupported reference: {ref}")


def _comment(text: str, indent: str) -> str:
    # An empty description line stays empty; it does not become "//".
    return "\n".join(f"{indent}// {line}" if line else "" for line in text.split("\n"))


def _kind(schema: Any) -> str:
    if isinstance(schema, bool):
        return "scalar"
    if "$ref" in schema:
        return "ref"
    if "anyOf" in schema:
        return "anyOf"
    if "enum" in schema:
        return "enum"
    if "type" in schema:
        t = schema["type"]
        if isinstance(t, list):
            return "union"
        return t if t in ("object", "array") else "scalar"
    if schema == {}:
        return "scalar"
    raise ValueError(f"invalid JSON Schema object: {schema}")


def _docstring(schema: Any, indent: str) -> str:
    """Description and constraint comment lines for a type, each ending in a newline."""
    if isinstance(schema, bool):
        return ""
    lines = []
    if schema.get("description"):
        lines.append(_comment(schema["description"], indent))
    kind = _kind(schema)
    allowed: tuple[str, ...] = ()
    if kind == "scalar":
        allowed = _CONSTRAINT_KEYS.get(schema.get("type", ""), ())
    elif kind == "array":
        allowed = _CONSTRAINT_KEYS["array"]
    constraints = sorted((k, schema[k]) for k in allowed if k in schema)
    if constraints:
        lines.append(f"{indent}// " + ", ".join(f"{k}: {v}" for k, v in constraints))
    return "".join(line + "\n" for line in lines)


def _type(schema: Any, indent: str, defs: _Defs) -> str:
    if isinstance(schema, bool):
        return "any" if schema else "null"
    kind = _kind(schema)
    if kind == "ref":
        return defs.ref_name(schema["$ref"])
    if kind == "anyOf":
        return " | ".join(_type(s, indent, defs) for s in schema["anyOf"])
    if kind == "enum":
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in schema["enum"])
    if kind == "union":
        return " | ".join(_UNION_NAMES[t] for t in schema["type"])
    if kind == "object":
        return _object(schema, indent, defs)
    if kind == "array":
        items = schema.get("items") or {}
        item_doc = _docstring(items, indent + _INDENT)
        if item_doc:
            inner = _type(items, indent + _INDENT, defs)
            return f"Array<\n{item_doc}{indent}{_INDENT}{inner}\n{indent}>"
        return f"Array<{_type(items, indent, defs)}>"
    if schema == {}:
        return "any"
    t = schema["type"]
    return "number" if t == "integer" else t


def _field(name: str, schema: Any, optional: bool, indent: str, defs: _Defs) -> str:
    text = _docstring(schema, indent)
    default = schema.get("default") if isinstance(schema, dict) else None
    if default is not None:
        shown = (
            repr(default)
            if isinstance(default, (bool, int, float))
            else json.dumps(default, ensure_ascii=False)
        )
        text += f"{indent}// Default: {shown}\n"
    mark = "?" if optional else ""
    return f"{text}{indent}{name}{mark}: {_type(schema, indent, defs)}"


def _object(schema: dict, indent: str, defs: _Defs) -> str:
    if "$defs" in schema:
        defs.definitions.update(schema["$defs"])
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    names = sorted(n for n in props if n in required) + sorted(
        n for n in props if n not in required
    )
    fields = [_field(n, props[n], n not in required, indent + _INDENT, defs) for n in names]
    extra = schema.get("additionalProperties")
    if extra is not None:
        if extra is True:
            extra_type = "any"
        elif extra is False:
            extra_type = "never"
        else:
            extra_type = _type(extra, indent + _INDENT, defs)
        fields.append(f"{indent}{_INDENT}[k: string]: {extra_type}")
    if not fields:
        return "{}"
    return "{\n" + ",\n".join(fields) + f"\n{indent}}}"


def _function(fn: dict) -> str:
    defs = _Defs()
    params = fn.get("parameters") or {}
    body = _object(params, "", defs) if params else "{}"
    blocks = []
    if defs.self_ref:
        props = params.get("properties") or {}
        required = set(params.get("required") or [])
        fields = [_field(n, s, n not in required, _INDENT, defs) for n, s in props.items()]
        inner = "\n" + ",\n".join(fields) + "\n" if fields else ""
        blocks.append(f"interface parameters {{{inner}}}")
        body = "parameters"
    for name, schema in list(defs.definitions.items()):
        desc = schema.get("description", "") if isinstance(schema, dict) else ""
        prefix = _comment(desc, "") + "\n" if desc else ""
        blocks.append(f"{prefix}interface {name} {_type(schema, '', defs)}")
    parts = ["\n".join(blocks)] if blocks else []
    if fn.get("description"):
        parts.append(_comment(fn["description"], ""))
    parts.append(f"type {fn.get('name', 'function')} = (_: {body}) => any;")
    return "\n".join(parts)


def encode_tools_typescript(tools: list[dict]) -> str:
    """Encode OpenAI tools as the K2.5 `tool_declare` body; "" when there is no function tool.

    Raises ValueError for schemas the encoder cannot express (the real tokenizer then falls
    back to JSON silently; eyas surfaces the error instead).
    """
    functions = [
        _function(t["function"])
        for t in deep_sort(tools or [])
        if t.get("type") == "function" and t.get("function")
    ]
    if not functions:
        return ""
    return "# Tools\n\n## functions\nnamespace functions {\n" + "\n".join(functions) + "\n}\n"
