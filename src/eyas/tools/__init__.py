"""Tool schemas: extraction, normalisation, and the Kimi-K2.5 TypeScript declaration encoder."""

from eyas.tools.schema import (
    ToolParseError,
    as_openai_tool,
    declared_names,
    deep_sort,
    make_tool_call,
    parse_loose_json,
    xlam_parameters_to_schema,
)
from eyas.tools.typescript import encode_tools_typescript

__all__ = [
    "ToolParseError",
    "as_openai_tool",
    "declared_names",
    "deep_sort",
    "encode_tools_typescript",
    "make_tool_call",
    "parse_loose_json",
    "xlam_parameters_to_schema",
]
