"""Kimi-K2.5 `tools_ts_str`: tool schemas as TypeScript declarations (docs/formats.md,
"TypeScript tool declarations").

The K2.5 tokenizer's `apply_chat_template` deep-sorts `tools`, encodes them with its
`tool_declaration_ts.py` and passes the string to the template's `tool_declare` turn; when that
encoder raises, the tokenizer prints "Failed to convert tools to TypeScript style" and the
template declares the tools as JSON instead. eyas supplies the same string when it renders with
a fast-tokenizer conversion, so this encoder must produce the official bytes where the official
one succeeds and raise `ValueError` exactly where it raises. It therefore works in the same two
phases: a schema is first parsed into a tree (which registers `$defs` and resolves `$ref`s in
parse order, and validates enums), then the tree is written out.

Rules, in brief:
- whole string: `# Tools\\n\\n## functions\\nnamespace functions {\\n` + functions joined by
  `\\n` + `\\n}\\n`; no function tools -> "".
- per function: `$defs` as `interface X {...}` blocks (in registration order), then the
  description as `// ` lines, then `type NAME = (_: PARAMS) => any;`.
- objects: required fields first, then optional (`name?:`), each group sorted by name; two
  spaces of indent per level; `additionalProperties` adds `[k: string]: T`.
- comments above a field: description, one constraints line (`key: value`, sorted),
  `// Default: ...` (JSON for strings and objects, Python repr for numbers and booleans).
- integer -> number; enum -> union of literals (values must match a declared type); list
  `type` -> union; anyOf -> ` | `; `{}`/true -> any; false -> null; missing items -> any.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from eyas.tools.schema import deep_sort

_INDENT = "  "
_SCALAR_CONSTRAINTS = {
    "string": ("maxLength", "minLength", "pattern"),
    "number": ("maximum", "minimum"),
    "integer": ("maximum", "minimum"),
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
_ENUM_CHECKS = {
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
}


def _comment(text: str, indent: str) -> str:
    # An empty description line stays empty; it does not become "//".
    return "\n".join(f"{indent}// {line}" if line else "" for line in text.split("\n"))


class _Registry:
    """`$defs` of one function, in registration order, and whether `$ref: "#"` was used."""

    def __init__(self) -> None:
        self.definitions: dict[str, Any] = {}
        self.self_ref = False

    def resolve(self, ref: str) -> str:
        if ref == "#":
            self.self_ref = True
            return "parameters"
        if ref.startswith("#/$defs/"):
            name = ref.split("/")[-1]
            if name not in self.definitions:
                raise ValueError(f"Reference not found: {ref}")
            return name
        raise ValueError(f"Unsupported reference format: {ref}")


@dataclass
class _Type:
    """A parsed schema node: its description, its constraints and how it is written."""

    description: Any = ""
    constraints: dict[str, Any] = field(default_factory=dict)

    def docstring(self, indent: str) -> str:
        lines = []
        if self.description:
            lines.append(_comment(self.description, indent))
        if self.constraints:
            pairs = ", ".join(f"{k}: {v}" for k, v in sorted(self.constraints.items()))
            lines.append(f"{indent}// {pairs}")
        return "".join(line + "\n" for line in lines)

    def write(self, indent: str) -> str:
        raise NotImplementedError


def _described(schema: dict, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "description": schema.get("description", ""),
        "constraints": {k: v for k, v in schema.items() if k in keys},
    }


@dataclass
class _Scalar(_Type):
    name: str = "any"

    def write(self, indent: str) -> str:
        return "number" if self.name == "integer" else self.name


@dataclass
class _Literals(_Type):
    values: list = field(default_factory=list)

    def write(self, indent: str) -> str:
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in self.values)


@dataclass
class _Joined(_Type):
    """anyOf members, or a list-valued `type` (names already mapped)."""

    members: list = field(default_factory=list)

    def write(self, indent: str) -> str:
        return " | ".join(m if isinstance(m, str) else m.write(indent) for m in self.members)


@dataclass
class _Ref(_Type):
    name: str = ""

    def write(self, indent: str) -> str:
        return self.name


@dataclass
class _Field:
    name: str
    type: _Type
    optional: bool
    default: Any = None

    def write(self, indent: str) -> str:
        text = self.type.docstring(indent)
        if self.default is not None:
            shown = (
                repr(self.default)
                if isinstance(self.default, (int, float, bool))
                else json.dumps(self.default, ensure_ascii=False)
            )
            text += f"{indent}// Default: {shown}\n"
        mark = "?" if self.optional else ""
        return f"{text}{indent}{self.name}{mark}: {self.type.write(indent)}"


@dataclass
class _Object(_Type):
    fields: list[_Field] = field(default_factory=list)
    extra: Any = None  # additionalProperties: None, a bool, a parsed type, or anything else

    def write(self, indent: str) -> str:
        required = sorted((f for f in self.fields if not f.optional), key=lambda f: f.name)
        optional = sorted((f for f in self.fields if f.optional), key=lambda f: f.name)
        lines = [f.write(indent + _INDENT) for f in required + optional]
        if self.extra is not None:
            if self.extra is True:
                extra = "any"
            elif self.extra is False:
                extra = "never"
            elif isinstance(self.extra, _Type):
                extra = self.extra.write(indent + _INDENT)
            else:
                raise ValueError(f"Unknown additionalProperties: {self.extra}")
            lines.append(f"{indent}{_INDENT}[k: string]: {extra}")
        if not lines:
            return "{}"
        return "{\n" + ",\n".join(lines) + f"\n{indent}}}"


@dataclass
class _Array(_Type):
    item: _Type = field(default_factory=_Scalar)

    def write(self, indent: str) -> str:
        doc = self.item.docstring(indent + _INDENT)
        if doc:
            inner = self.item.write(indent + _INDENT)
            return f"Array<\n{doc}{indent}{_INDENT}{inner}\n{indent}>"
        return f"Array<{self.item.write(indent)}>"


# -- parsing -----------------------------------------------------------------------------------


def _check_enum(schema: dict) -> None:
    """Enum values must be of the declared type (`None` always passes)."""
    if "type" not in schema:
        return
    kind = schema["type"]
    if isinstance(kind, list):
        if len(kind) == 1:
            kind = kind[0]
        elif len(kind) == 2 and "null" in kind:
            kind = kind[0] if kind[0] != "null" else kind[1]
        else:
            raise ValueError(f"Enum type {kind} is not supported")
    check = _ENUM_CHECKS.get(kind) if isinstance(kind, str) else None
    for value in schema["enum"]:
        if value is not None and check is not None and not isinstance(value, check):
            raise ValueError(f"Enum value {value} is not a {kind}")


def _parse_object(schema: Any, registry: _Registry) -> _Object:
    node = _Object(description=schema.get("description", ""))
    if not schema:
        return node
    defs = schema.get("$defs")
    if defs:
        if not isinstance(defs, dict):
            raise ValueError(f"$defs is not an object: {defs!r}")
        registry.definitions.update(defs)
    extra = schema.get("additionalProperties")
    node.extra = _parse(extra, registry) if isinstance(extra, dict) else extra
    if "properties" not in schema:
        return node
    optional = set(schema["properties"]) - set(schema.get("required", []))
    node.fields = [
        _Field(
            name,
            _parse(prop, registry),
            name in optional,
            prop.get("default") if isinstance(prop, dict) else None,
        )
        for name, prop in schema["properties"].items()
    ]
    return node


def _parse(schema: Any, registry: _Registry) -> _Type:
    if isinstance(schema, bool):
        return _Scalar(name="any" if schema else "null")
    if not isinstance(schema, dict):
        raise ValueError(f"Invalid JSON Schema object: {schema!r}")
    if "$ref" in schema:
        return _Ref(**_described(schema), name=registry.resolve(schema["$ref"]))
    if "anyOf" in schema:
        return _Joined(**_described(schema), members=[_parse(s, registry) for s in schema["anyOf"]])
    if "enum" in schema:
        _check_enum(schema)
        return _Literals(**_described(schema), values=list(schema["enum"]))
    if "type" in schema:
        kind = schema["type"]
        if isinstance(kind, list):
            try:
                names = [_UNION_NAMES[k] for k in kind]
            except (KeyError, TypeError) as exc:
                raise ValueError(f"unsupported type in union: {kind}") from exc
            return _Joined(**_described(schema), members=names)
        if kind == "object":
            return _parse_object(schema, registry)
        if kind == "array":
            items = schema.get("items")
            node = _Array(**_described(schema, ("maxItems", "minItems")))
            if items:
                node.item = _parse(items, registry)
            return node
        if not isinstance(kind, str):
            raise ValueError(f"Invalid JSON Schema type: {kind!r}")
        return _Scalar(**_described(schema, _SCALAR_CONSTRAINTS.get(kind, ())), name=kind)
    if schema == {}:
        return _Scalar()
    raise ValueError(f"Invalid JSON Schema object: {schema}")


# -- writing -----------------------------------------------------------------------------------


def _function(fn: dict) -> str:
    registry = _Registry()
    params = fn.get("parameters") or {}
    if not isinstance(params, dict):
        raise ValueError(f"parameters is not an object: {params!r}")
    root = _parse_object(params, registry)
    blocks = []
    self_ref = registry.self_ref  # a `#` ref met only inside a definition does not count
    if self_ref:
        # The root interface keeps the source order and leaves out additionalProperties.
        fields = ",\n".join(f.write(_INDENT) for f in root.fields)
        inner = "\n" + fields + "\n" if fields else ""
        blocks.append("interface parameters {" + inner + "}")
    # Definitions registered while parsing the parameters; ones registered only while
    # parsing a definition are not written (the official encoder works on a snapshot).
    for name, schema in dict(registry.definitions).items():
        body = _parse(schema, registry).write("")
        if not isinstance(schema, dict):
            raise ValueError(f"$defs entry {name} is not an object")
        desc = schema.get("description", "")
        head = _comment(desc, "") + "\n" if desc else ""
        blocks.append(f"{head}interface {name} {body}")
    signature = "parameters" if self_ref else root.write("")
    description = fn.get("description")
    parts = [
        "\n".join(blocks),
        (description and _comment(description, "")) or "",
        f"type {fn.get('name', 'function')} = (_: {signature}) => any;",
    ]
    return "\n".join(p for p in parts if p)


def encode_tools_typescript(tools: list[dict]) -> str:
    """Encode OpenAI tools as the K2.5 `tool_declare` body; "" when there is no function tool.

    Raises ValueError (or TypeError/AttributeError on a malformed tool object) wherever the
    official encoder raises, i.e. wherever Moonshot's tokenizer would fall back to JSON.
    """
    functions = []
    for tool in deep_sort(tools or []):
        if not isinstance(tool, dict):
            raise ValueError(f"tool is not an object: {tool!r}")
        fn = tool.get("function", {}) if tool.get("type") == "function" else None
        if fn:
            if not isinstance(fn, dict):
                raise ValueError(f"function is not an object: {fn!r}")
            functions.append(_function(fn))
    if not functions:
        return ""
    return "# Tools\n\n## functions\nnamespace functions {\n" + "\n".join(functions) + "\n}\n"
