"""NousResearch/hermes-function-calling-v1 (docs/formats.md).

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
_ESCAPED_NEWLINE = "\\n"  # a backslash and an "n" where a newline belongs

_CALL_SCHEMA = "{'arguments': <args-dict>, 'name': <function-name>}"
_PYDANTIC = (
    "{'title': 'FunctionCall', 'type': 'object', 'properties': {'arguments': {'title': "
    "'Arguments', 'type': 'object'}, 'name': {'title': 'Name', 'type': 'string'}}, "
    "'required': ['arguments', 'name']}"
)
_PYDANTIC_JSON = (
    '{"properties": {"arguments": {"title": "Arguments", "type": "object"}, "name": {"title": '
    '"Name", "type": "string"}}, "required": ["arguments", "name"], "title": "FunctionCall", '
    '"type": "object"}'
)
# Whole system-prompt templates with their tool slot, each as its source writes it. Only a
# complete match is removed; whitespace runs may differ, nothing else.
TEMPLATES = {
    # hermes-function-calling-v1 func-calling rows (dataset card, "Tool-use with API response").
    "func_calling": (
        "You are a function calling AI model. You are provided with function signatures within "
        "<tools> </tools> XML tags. You may call one or more functions to assist with the user "
        "query. Don't make assumptions about what values to plug into functions.\n<tools>\n{tools}"
        "\n</tools>\nFor each function call return a json object with function name and arguments "
        "within <tool_call> </tool_call> tags with the following schema:\n<tool_call>\n"
        f"{_CALL_SCHEMA}\n</tool_call>"
    ),
    # hermes-function-calling-v1 json-mode-agentic extraction rows (dataset card, "Structured
    # extraction with function-calling").
    "structured_extraction": (
        "You are an expert structured information extraction AI model. You will be provided "
        "with documents to extract information from. You are also provided with the json "
        "schema to output extracted information in the function signatures within XML tags "
        "<tools></tools>. Don't make assumptions about what values to plug into json schema. "
        "\n<tools>\n{tools}\n</tools>\nFor each extraction function call return a json object "
        "with function name and arguments followed by a <tool_call> tag with the following "
        f"schema:\n<tool_call>\n{_CALL_SCHEMA}\n</tool_call>"
    ),
    # Hermes 2 Pro model card prompt (Python-repr schema), also in the dataset card.
    "hermes_2_pro": (
        "You are a function calling AI model. You are provided with function signatures within "
        "<tools></tools> XML tags. You may call one or more functions to assist with the user "
        "query. Don't make assumptions about what values to plug into functions. Here are the "
        "available tools: <tools> {tools} </tools> Use the following pydantic model json schema "
        f"for each tool call you will make: {_PYDANTIC} For each function call return a json "
        "object with function name and arguments within <tool_call></tool_call> XML tags as "
        f"follows:\n<tool_call>\n{_CALL_SCHEMA}\n</tool_call>"
    ),
    # Hermes 3 chat template (JSON schema, double quotes), as Ollama's hermes3 ships it.
    "hermes_3": (
        "You are a function calling AI model. You are provided with function signatures within "
        "<tools></tools> XML tags. You may call one or more functions to assist with the user "
        "query. Don't make assumptions about what values to plug into functions. Here are the "
        "available tools: <tools>{tools}</tools> Use the following pydantic model json schema "
        f"for each tool call you will make: {_PYDANTIC_JSON} For each function call return a "
        "json object with function name and arguments within <tool_call></tool_call> XML tags "
        'as follows:\n<tool_call>\n{"arguments": <args-dict>, "name": <function-name>}\n'
        "</tool_call>"
    ),
}


def _template_pattern(template: str) -> re.Pattern:
    head, tail = template.split("{tools}")

    def loose(text: str) -> str:
        return r"\s*".join(re.escape(part) for part in text.split()) if text.strip() else ""

    # Whitespace at a template's edges and around the tool slot is optional.
    return re.compile(r"\s*" + loose(head) + r"\s*(?P<tools>.*?)\s*" + loose(tail), re.DOTALL)


_TEMPLATE_PATTERNS = {name: _template_pattern(t) for name, t in TEMPLATES.items()}
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
    """Move the tools of a known template to `draft.tools` and remove the template whole.

    Text outside the template is kept as written. A prompt with `<tools>` that matches no
    known template is kept entire, tools included (the audit flags tool text in a prompt);
    its tools are still declared, so the calls that follow stay valid.
    """
    for name, pattern in _TEMPLATE_PATTERNS.items():
        match = pattern.search(text)
        if match:
            draft.tools.extend(_parse_tools(match.group("tools")))
            draft.notes.append(f"{len(draft.tools)} tools extracted from the {name} template")
            kept = (text[: match.start()].strip() + "\n" + text[match.end() :].strip()).strip()
            if kept:
                draft.notes.append("system text outside the tool template kept")
            return kept or None
    blocks = [b for b in _TOOLS.findall(text) if b.strip()]
    for block in blocks:
        draft.tools.extend(_parse_tools(block))
    if blocks:
        draft.notes.append(
            f"{len(draft.tools)} tools extracted; the system prompt matches no known Hermes "
            "template and is kept whole"
        )
    return text.strip() or None


def _call_body(body: str, draft: Draft) -> list[tuple[str, object]]:
    """Parse one `<tool_call>` body; recover a body framed by escaped newlines
    (`<tool_call>\\n{...}\\n</tool_call>`, as in the dataset's extraction rows)."""
    try:
        return parse_calls(body)
    except ConversionError as exc:
        stripped = body.strip()
        framed = stripped.startswith(_ESCAPED_NEWLINE) or stripped.endswith(_ESCAPED_NEWLINE)
        if exc.reason != "unparseable_tool_call" or not framed:
            raise
    calls = parse_calls(stripped.removeprefix(_ESCAPED_NEWLINE).removesuffix(_ESCAPED_NEWLINE))
    draft.notes.append("tool call framed by escaped newlines recovered")
    return calls


def _calls(text: str, draft: Draft) -> list[tuple[str, object]]:
    return [call for body in _CALL.findall(text) for call in _call_body(body, draft)]


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
            draft.add_calls(_calls(value, draft), content=content)
        elif role == "tool":
            for name, content in _results(value):
                draft.add_result(content, name)
        else:
            draft.add(role, value)
    if not draft.messages:
        raise ConversionError("empty_conversation", "no turns")
    return draft
