"""glaiveai/glaive-function-calling-v2: `system` + `chat` strings (docs/formats.md).

The system string carries pretty-printed JSON function objects after a boilerplate sentence;
the chat string has `USER:` / `ASSISTANT:` / `FUNCTION RESPONSE:` turns, assistant turns end
with `<|endoftext|>`, and calls are written `<functioncall> {"name": .., "arguments": '{..}'}`
with a single-quoted JSON string that is not valid JSON as a whole.
"""

from __future__ import annotations

import json
import re

from eyas.sources.common import ConversionError, Draft
from eyas.tools.schema import ToolParseError, as_openai_tool

# The tool lead-ins the dataset uses, each a whole clause; the persona before it is kept as
# written. v2: "SYSTEM: You are a helpful assistant with access to the following functions. Use
# them if required -" (rows 0, 2144, 25475 of glaive-function-calling-v2); v1: "SYSTEM: You are an
# helpful assistant who has access to the following functions to help the user, you can use the
# functions if needed-" (glaive-function-calling v1).
_TOOL_LEAD_INS = re.compile(
    r"\s*(?:with access to the following functions\.\s*Use them if required\s*-"
    r"|who has access to the following functions to help the user,\s*you can use the "
    r"functions if needed\s*-)",
    re.IGNORECASE,
)
_TURN = re.compile(r"(?:^|\n)\s*(USER|ASSISTANT|FUNCTION RESPONSE):[ \t]?", re.MULTILINE)
_EOT = "<|endoftext|>"


def _split_system(system: str, draft: Draft) -> str | None:
    """Move function objects from the system string to `draft.tools`; return the kept text."""
    text = system.strip()
    if text.startswith("SYSTEM:"):
        text = text[len("SYSTEM:") :].strip()
    match = _TOOL_LEAD_INS.search(text)
    if not match:
        return text or None
    persona = text[: match.start()].rstrip()
    rest = text[match.end() :]
    decoder = json.JSONDecoder()
    pos, leftover = 0, []
    while pos < len(rest):
        if rest[pos].isspace():
            pos += 1
            continue
        if rest[pos] != "{":
            leftover.append(rest[pos:].strip())
            break
        try:
            obj, pos = decoder.raw_decode(rest, pos)
        except json.JSONDecodeError as exc:
            raise ConversionError("unparseable_tools", f"function JSON at {pos}: {exc}") from exc
        try:
            draft.tools.append(as_openai_tool(obj))
        except ToolParseError as exc:
            raise ConversionError.wrap(exc) from exc
    if not draft.tools:
        raise ConversionError("unparseable_tools", "tool boilerplate but no function objects")
    draft.notes.append(f"{len(draft.tools)} tools extracted from system prompt")
    if leftover:
        draft.notes.append("text after the function list kept in the system prompt")
    kept = "\n".join(p for p in [persona, *leftover] if p)
    return kept or None


def _parse_call(text: str) -> tuple[str, object]:
    """Parse `{"name": "f", "arguments": '{..}'}`, tolerating the single-quoted string."""
    body = text.strip()
    name_match = re.search(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"', body)
    if not name_match:
        raise ConversionError("unparseable_tool_call", f"no name in {body[:80]!r}")
    name = json.loads(f'"{name_match.group(1)}"')
    args_match = re.search(r'"arguments"\s*:\s*', body)
    if not args_match:
        return name, {}
    start = args_match.end()
    opener = body[start : start + 1]
    try:
        if opener == "'":
            # The argument string runs to the last quote before the closing brace, so
            # apostrophes inside values ("Doctor's appointment") stay intact.
            end = body.rstrip().rstrip("}").rstrip().rfind("'")
            if end <= start:
                raise ConversionError("unparseable_tool_call", f"unterminated arguments in {name}")
            return name, json.loads(body[start + 1 : end])
        value, _ = json.JSONDecoder().raw_decode(body, start)
    except json.JSONDecodeError as exc:
        raise ConversionError("unparseable_tool_call", f"{name}: arguments: {exc}") from exc
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConversionError("unparseable_tool_call", f"{name}: arguments: {exc}") from exc
    return name, value


def convert(row: dict) -> Draft:
    system, chat = row.get("system"), row.get("chat")
    if not isinstance(chat, str) or not isinstance(system, (str, type(None))):
        raise ConversionError("missing_field", "glaive rows need string `system` and `chat`")
    draft = Draft()
    kept_system = _split_system(system or "", draft)
    if kept_system:
        draft.add("system", kept_system)
    pieces = _TURN.split(chat)
    if pieces[0].strip():
        raise ConversionError(
            "unknown_role", f"text before the first role prefix: {pieces[0][:60]!r}"
        )
    stray_eot = 0
    for role, text in zip(pieces[1::2], pieces[2::2]):
        text = text.strip()
        if text.endswith(_EOT):
            text = text[: -len(_EOT)].rstrip()
        if _EOT in text:
            stray_eot += text.count(_EOT)
            text = text.replace(_EOT, "").strip()
        if role == "USER":
            draft.add("user", text)
        elif role == "FUNCTION RESPONSE":
            draft.add_result(text)
        elif "<functioncall>" in text:
            before, _, call = text.partition("<functioncall>")
            draft.add_calls([_parse_call(call)], content=before.strip())
        else:
            draft.add("assistant", text)
    if stray_eot:
        draft.notes.append(f"{stray_eot} stray <|endoftext|> removed")
    if not any(m["role"] != "system" for m in draft.messages):
        raise ConversionError("empty_conversation", "no turns in `chat`")
    return draft
