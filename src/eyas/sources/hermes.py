"""NousResearch/hermes-function-calling-v1 (formats.md §6.2).

Rows hold `conversations: [{"from": system|human|gpt|tool, "value": str}]`. Tools sit in the
system prompt inside `<tools>...</tools>` (JSON or Python-repr dicts), calls are
`<tool_call>{..}</tool_call>` blocks in `gpt` turns, results `<tool_response>{..}</tool_response>`
blocks in `tool` turns.
"""

from __future__ import annotations

import json
import re

from eyas.sources.common import ConversionError, Draft, parse_calls
from eyas.tools.schema import ToolParseError, as_openai_tool, parse_loose_json

_TOOLS = re.compile(r"<tools>(.*?)</tools>", re.DOTALL)
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
# Sentences of the Hermes function-calling system prompt; everything else is kept.
_BOILERPLATE = [
    re.compile(p, re.IGNORECASE | re.DOTALL)
    for p in (
        r"You are a function calling AI model\.",
        r"You are provided with function signatures within\s*<tools>\s*</tools>\s*XML tags\.",
        r"You may call one or more functions to assist with the user query\.",
        r"Don't make assumptions about what values to plug into functions\.",
        r"Here are the available tools:",
        r"Use the following pydantic model json schema for each tool call you will make:\s*"
        r"\{.*?\}(?=\s*(?:For each|$))",
        r"For each function call return a json object with function name and arguments "
        r"within\s*<tool_call>\s*</tool_call>\s*XML tags as follows:",
        r"<tool_call>.*?</tool_call>",
    )
]
_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}


def _split_objects(text: str) -> list[str]:
    """Top-level `{...}` chunks of a text, respecting quoted strings."""
    chunks, depth, start, quote, escape = [], 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                chunks.append(text[start : i + 1])
    return chunks


def _parse_tools(block: str) -> list[dict]:
    try:
        parsed = parse_loose_json(block)
        items = parsed if isinstance(parsed, list) else [parsed]
    except ToolParseError:
        items = []
        for chunk in _split_objects(block):
            try:
                items.append(parse_loose_json(chunk))
            except ToolParseError as exc:
                raise ConversionError("unparseable_tools", exc.detail) from exc
    try:
        return [as_openai_tool(item) for item in items]
    except ToolParseError as exc:
        raise ConversionError.wrap(exc) from exc


def _system(text: str, draft: Draft) -> str | None:
    # Boilerplate first: its first sentence itself contains an empty "<tools> </tools>".
    kept = text
    for pattern in _BOILERPLATE:
        kept = pattern.sub(" ", kept)
    blocks = [b for b in _TOOLS.findall(kept) if b.strip()]
    if not blocks:
        return text.strip() or None
    for block in blocks:
        draft.tools.extend(_parse_tools(block))
    kept = _TOOLS.sub(" ", kept)
    kept = re.sub(r"[ \t]+", " ", kept)
    kept = re.sub(r"\s*\n\s*", "\n", kept).strip()
    draft.notes.append(f"{len(draft.tools)} tools extracted from system prompt")
    if kept:
        draft.notes.append("tool boilerplate removed; remaining system text kept")
    return kept or None


def _calls(text: str) -> list[tuple[str, object]]:
    return [call for body in _CALL.findall(text) for call in parse_calls(body)]


def _results(text: str) -> list[tuple[str | None, str]]:
    bodies = _RESPONSE.findall(text) or [text]
    out = []
    for body in bodies:
        try:
            obj = parse_loose_json(body)
        except ToolParseError:
            out.append((None, body.strip()))
            continue
        if isinstance(obj, dict) and "content" in obj:
            content = obj["content"]
            text_content = (
                content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            )
            out.append((obj.get("name"), text_content))
        else:
            out.append((None, json.dumps(obj, ensure_ascii=False)))
    return out


def convert(row: dict) -> Draft:
    turns = row.get("conversations")
    if not isinstance(turns, list):
        raise ConversionError("missing_field", "hermes rows need a `conversations` list")
    draft = Draft()
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ConversionError("bad_content", f"conversations[{i}] has no string value")
        role = _ROLES.get(turn.get("from", ""))
        if role is None:
            raise ConversionError("unknown_role", f"conversations[{i}].from={turn.get('from')!r}")
        value = turn["value"]
        if role == "system":
            kept = _system(value, draft)
            if kept:
                draft.add("system", kept)
        elif role == "assistant" and "<tool_call>" in value:
            content = _CALL.sub("", value).strip()
            draft.add_calls(_calls(value), content=content)
        elif role == "tool":
            for name, content in _results(value):
                draft.add_result(content, name)
        else:
            draft.add(role, value)
    if not draft.messages:
        raise ConversionError("empty_conversation", "no turns")
    return draft
