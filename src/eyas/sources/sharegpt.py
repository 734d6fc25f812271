"""ShareGPT (docs/formats.md): `conversations: [{"from", "value"}]`, or `role`/`content` keys.

`function_call` turns become assistant tool calls, `observation`/`tool`/`function` turns tool
results; an optional row-level `system` string and `tools` (JSON string, LLaMA-Factory style)
are honoured. Role-order anomalies (no user turn, a leading assistant turn, repeated roles)
are refused or repaired with a note: see `normalize_role_order`.
"""

from __future__ import annotations

from eyas.sources.common import ConversionError, Draft, normalize_role_order, parse_calls
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
            draft.add_calls(parse_calls(value))
        elif role == "tool":
            draft.add_result(value)
        else:
            draft.add(role, value)
    if not draft.messages:
        raise ConversionError("empty_conversation", "no turns")
    normalize_role_order(draft)
    return draft
