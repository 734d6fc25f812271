"""TypeScript declaration encoder: golden strings written by hand from the official encoder's
rules (docs/formats.md) and checked against its output."""

from eyas.tools import encode_tools_typescript


def fn(name, parameters=None, description=None):
    f = {"name": name}
    if description:
        f["description"] = description
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


def body(tools):
    """The declaration without the fixed header and footer."""
    out = encode_tools_typescript(tools)
    head = "# Tools\n\n## functions\nnamespace functions {\n"
    assert out.startswith(head) and out.endswith("\n}\n")
    return out[len(head) : -len("\n}\n")]


def test_formats_md_worked_example():
    params = {
        "type": "object",
        "properties": {
            "unit": {
                "type": "string",
                "enum": ["celsius", "fahrenheit"],
                "description": "Temperature unit",
                "default": "celsius",
            },
            "tags": {"type": "array", "items": {"type": "string", "description": "a tag"}},
            "opts": {
                "type": "object",
                "properties": {"lang": {"type": "string"}, "verbose": {"type": "boolean"}},
                "required": ["verbose"],
            },
            "maybe": {"type": ["string", "null"]},
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            },
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["location", "days"],
    }
    expected = (
        "// Get the current weather for a location\n"
        "type get_weather = (_: {\n"
        "  // maximum: 7, minimum: 1\n"
        "  days: number,\n"
        "  // The city and state, e.g. San Francisco, CA\n"
        "  location: string,\n"
        "  maybe?: string | null,\n"
        "  opts?: {\n"
        "    verbose: boolean,\n"
        "    lang?: string\n"
        "  },\n"
        "  tags?: Array<\n"
        "    // a tag\n"
        "    string\n"
        "  >,\n"
        "  // Temperature unit\n"
        '  // Default: "celsius"\n'
        '  unit?: "celsius" | "fahrenheit"\n'
        "}) => any;"
    )
    assert body([fn("get_weather", params, "Get the current weather for a location")]) == expected


def test_empty_and_non_function_tools():
    assert encode_tools_typescript([]) == ""
    assert encode_tools_typescript([{"type": "_plugin", "function": {"name": "x"}}]) == ""


def test_missing_or_empty_parameters_and_multiline_description():
    out = body([fn("ping"), fn("pong", {}, "Line one\n\nLine three")])
    assert out == (
        "type ping = (_: {}) => any;\n// Line one\n\n// Line three\ntype pong = (_: {}) => any;"
    )


def test_scalars_defaults_and_constraints():
    params = {
        "type": "object",
        "properties": {
            "n": {"type": "number", "default": 1.5, "format": "float"},
            "b": {"type": "boolean", "default": True},
            "i": {"type": "integer", "default": 3},
            "s": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^a"},
            "o": {"type": "object", "default": {"k": "é"}},
            "z": {"type": "null"},
            "w": {"type": "weird"},
            "anything": {},
        },
        "required": ["z"],
    }
    assert body([fn("f", params)]) == (
        "type f = (_: {\n"
        "  z: null,\n"
        "  anything?: any,\n"
        "  // Default: True\n"
        "  b?: boolean,\n"
        "  // Default: 3\n"
        "  i?: number,\n"
        "  // Default: 1.5\n"
        "  n?: number,\n"
        '  // Default: {"k": "é"}\n'
        "  o?: {},\n"
        "  // maxLength: 5, minLength: 1, pattern: ^a\n"
        "  s?: string,\n"
        "  w?: weird\n"
        "}) => any;"
    )


def test_enums_unions_anyof_and_arrays():
    params = {
        "type": "object",
        "properties": {
            "e": {"enum": [1, 2]},
            "u": {"type": ["integer", "object", "array", "boolean"]},
            "a": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]},
            "plain": {"type": "array", "items": {"type": "string"}},
            "bare": {"type": "array"},
            "sized": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 3},
        },
        "required": ["e", "u", "a", "plain", "bare", "sized"],
    }
    assert body([fn("f", params)]) == (
        "type f = (_: {\n"
        "  a: string | Array<number>,\n"
        "  bare: Array<any>,\n"
        "  e: 1 | 2,\n"
        "  plain: Array<string>,\n"
        "  // maxItems: 3\n"
        "  sized: Array<\n"
        "    // minimum: 0\n"
        "    number\n"
        "  >,\n"
        "  u: number | {} | Array<any> | boolean\n"
        "}) => any;"
    )


def test_additional_properties():
    def one(ap, props=None):
        schema = {"type": "object", "additionalProperties": ap}
        if props:
            schema["properties"] = props
        return body([fn("f", {"type": "object", "properties": {"m": schema}, "required": ["m"]})])

    assert one(True) == "type f = (_: {\n  m: {\n    [k: string]: any\n  }\n}) => any;"
    assert one(False) == "type f = (_: {\n  m: {\n    [k: string]: never\n  }\n}) => any;"
    assert one({"type": "integer"}, {"x": {"type": "string"}}) == (
        "type f = (_: {\n  m: {\n    x?: string,\n    [k: string]: number\n  }\n}) => any;"
    )


def test_defs_and_refs():
    params = {
        "type": "object",
        "$defs": {
            "Point": {
                "type": "object",
                "description": "A point",
                "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                "required": ["x", "y"],
            }
        },
        "properties": {"at": {"$ref": "#/$defs/Point"}},
        "required": ["at"],
    }
    assert body([fn("move", params, "Move")]) == (
        "// A point\n"
        "interface Point {\n  x: number,\n  y: number\n}\n"
        "// Move\n"
        "type move = (_: {\n  at: Point\n}) => any;"
    )


def test_self_reference_makes_a_root_interface():
    params = {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
        "required": ["name"],
    }
    assert body([fn("tree", params)]) == (
        "interface parameters {\n  children?: Array<parameters>,\n  name: string\n}\n"
        "type tree = (_: parameters) => any;"
    )


def test_source_key_order_never_matters():
    a = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "string"}}}
    b = {"properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "type": "object"}
    assert encode_tools_typescript([fn("f", a)]) == encode_tools_typescript([fn("f", b)])


def test_several_functions_joined_by_newline():
    out = encode_tools_typescript([fn("a"), fn("b")])
    assert out == (
        "# Tools\n\n## functions\nnamespace functions {\n"
        "type a = (_: {}) => any;\ntype b = (_: {}) => any;\n}\n"
    )
