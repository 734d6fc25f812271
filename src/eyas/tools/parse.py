"""Parse a model's native output at the marker *token ids* (formats.md §3).

eyas works on ids, so reasoning, content and tool calls are split where the single marker
tokens sit; no text regex over decoded output is needed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

KIMI_CALL_ID = re.compile(r"^functions\.([\w.\-]+):(\d+)$")


@dataclass
class ParsedCall:
    raw_id: str
    name: str | None
    index: int | None
    arguments: str
    arguments_json: Any = None
    valid_json: bool = False


@dataclass
class ParsedOutput:
    reasoning: str | None
    content: str
    calls: list[ParsedCall] = field(default_factory=list)
    ended: bool = False  # an end-of-turn token was produced
    malformed: list[str] = field(default_factory=list)


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False) if ids else ""


def parse_kimi_output(
    ids: list[int], tokenizer: Any, stop_ids: set[int] | None = None
) -> ParsedOutput:
    """Split generated ids (the tokens after the generation prompt) into parts.

    With thinking on, K2.5's prompt ends in `<think>`, so reasoning runs up to `</think>`
    (or to a tool section that starts before it, which ends reasoning implicitly).
    """
    vocab = tokenizer.get_vocab()
    m = {
        name: vocab.get(name)
        for name in (
            "</think>",
            "<think>",
            "<|im_end|>",
            "[EOS]",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        )
    }
    stops = stop_ids if stop_ids is not None else {m["<|im_end|>"], m["[EOS]"]} - {None}
    end = next((i for i, t in enumerate(ids) if t in stops), None)
    body = ids if end is None else ids[:end]
    section = m["<|tool_calls_section_begin|>"]
    sec_at = body.index(section) if section in body else len(body)
    close = m["</think>"]
    reasoning = None
    start = 0
    if close in body[:sec_at]:
        k = body.index(close)
        head = body[:k]
        if head and head[0] == m["<think>"]:
            head = head[1:]
        reasoning = _decode(tokenizer, head)
        start = k + 1
    content = _decode(tokenizer, body[start:sec_at])
    out = ParsedOutput(reasoning, content, ended=end is not None)
    if sec_at == len(body):
        return out
    section_ids = body[sec_at + 1 :]
    if m["<|tool_calls_section_end|>"] in section_ids:
        section_ids = section_ids[: section_ids.index(m["<|tool_calls_section_end|>"])]
    else:
        out.malformed.append("unterminated_tool_section")
    begin, arg, call_end = (
        m["<|tool_call_begin|>"],
        m["<|tool_call_argument_begin|>"],
        m["<|tool_call_end|>"],
    )
    i = 0
    while i < len(section_ids):
        if section_ids[i] != begin:
            out.malformed.append("text_between_calls")
            i += 1
            continue
        try:
            a = section_ids.index(arg, i)
            e = section_ids.index(call_end, a)
        except ValueError:
            out.malformed.append("unterminated_tool_call")
            break
        raw_id = _decode(tokenizer, section_ids[i + 1 : a]).strip()
        args = _decode(tokenizer, section_ids[a + 1 : e])
        match = KIMI_CALL_ID.match(raw_id)
        call = ParsedCall(
            raw_id, match.group(1) if match else None, int(match.group(2)) if match else None, args
        )
        try:
            call.arguments_json = json.loads(args)
            call.valid_json = isinstance(call.arguments_json, dict)
        except json.JSONDecodeError:
            pass
        out.calls.append(call)
        i = e + 1
    return out
