"""OpenAI messages with tools (docs/formats.md), eyas's canonical shape.

Also accepts the legacy `function_call` field and `role: "function"` results. Arguments given
as objects are encoded to JSON strings; calls without ids get Kimi-style ids.
"""

from __future__ import annotations

import json

from eyas.sources.common import ConversionError, Draft
from eyas.tools.schema import ToolParseError, as_openai_tool, parse_loose_json

_KEEP = ("reasoning_content", "name")


def convert(row: dict) -> Draft:
    messages = row.get("messages")
    if not isinstance(messages, list):
        raise ConversionError("missing_field", "OpenAI rows need a `messages` list")
    draft = Draft()
    tools = row.get("tools") or []
    try:
        if isinstance(tools, str):
            tools = parse_loose_json(tools)
        draft.tools = [as_openai_tool(t) for t in tools]
    except ToolParseError as exc:
        raise ConversionError("unparseable_tools", exc.detail) from exc
    legacy = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ConversionError("bad_content", f"messages[{i}] is not an object")
        role = msg.get("role")
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ConversionError("bad_content", f"messages[{i}].content is not text")
        extra = {k: msg[k] for k in _KEEP if isinstance(msg.get(k), str) and msg[k]}
        if role == "assistant" and (msg.get("tool_calls") or msg.get("function_call")):
            raw = msg.get("tool_calls") or [{"function": msg["function_call"]}]
            legacy += "function_call" in msg
            calls = []
            for j, call in enumerate(raw):
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ConversionError("unparseable_tool_call", f"messages[{i}].tool_calls[{j}]")
                calls.append((call.get("id"), fn["name"], fn.get("arguments", {})))
            extra.pop("name", None)
            draft.add_calls(
                [(n, a) for _, n, a in calls], content=content, ids=[c for c, _, _ in calls]
            )
            draft.messages[-1].update(extra)
        elif role in ("tool", "function"):
            legacy += role == "function"
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            draft.add_result(text, msg.get("name"), msg.get("tool_call_id"))
        elif role in ("system", "user", "assistant"):
            draft.add(role, content, **extra)
        else:
            raise ConversionError("unknown_role", f"messages[{i}].role={role!r}")
    if legacy:
        draft.notes.append(f"{legacy} legacy function_call/function messages converted")
    if not draft.messages:
        raise ConversionError("empty_conversation", "no messages")
    return draft
