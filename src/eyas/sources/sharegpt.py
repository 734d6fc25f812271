"""ShareGPT (formats.md §6.4): `conversations: [{"from", "value"}]`, or `role`/`content` keys.

`function_call` turns become assistant tool calls, `observation`/`tool`/`function` turns tool
results; an optional row-level `system` string and `tools` (JSON string, LLaMA-Factory style)
are honoured.
"""

from __future__ import annotations

from eyas.sources.common import ConversionError, Draft
from eyas.tools.schema import ToolParseError, as_openai_tool, parse_loose_json

_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "model": "assistant",
    "function_call": "call",
    "observation": "tool",
    "tool": "tool",
    "function": "tool",
}


def _calls(value: str) -> list[tuple[str, object]]:
    try:
        obj = parse_loose_json(value)
    except ToolParseError as exc:
        raise ConversionError("unparseable_tool_call", exc.detail) from exc
    items = obj if isinstance(obj, list) else [obj]
    calls = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ConversionError("unparseable_tool_call", f"call without name: {value[:80]!r}")
        args = item.get("arguments", {})
        if isinstance(args, str):
            try:
                args = parse_loose_json(args)
            except ToolParseError as exc:
                raise ConversionError("unparseable_tool_call", exc.detail) from exc
        calls.append((item["name"], args))
    return calls


def convert(row: dict) -> Draft:
    turns = row.get("conversations", row.get("messages"))
    if not isinstance(turns, list):
        raise ConversionError("missing_field", "ShareGPT rows need a `conversations` list")
    draft = Draft()
    tools = row.get("tools")
    if tools:
        try:
            parsed = parse_loose_json(tools) if isinstance(tools, str) else tools
            items = parsed if isinstance(parsed, list) else [parsed]
            draft.tools = [as_openai_tool(t) for t in items]
        except ToolParseError as exc:
            raise ConversionError("unparseable_tools", exc.detail) from exc
    if isinstance(row.get("system"), str) and row["system"].strip():
        draft.add("system", row["system"])
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ConversionError("bad_content", f"conversations[{i}] is not an object")
        who = turn.get("from", turn.get("role"))
        value = turn.get("value", turn.get("content"))
        role = _ROLES.get(str(who).lower())
        if role is None:
            raise ConversionError("unknown_role", f"conversations[{i}].from={who!r}")
        if not isinstance(value, str):
            raise ConversionError("bad_content", f"conversations[{i}] has no string value")
        if role == "call":
            draft.add_calls(_calls(value))
        elif role == "tool":
            draft.add_result(value)
        else:
            draft.add(role, value)
    if not draft.messages:
        raise ConversionError("empty_conversation", "no turns")
    return draft
