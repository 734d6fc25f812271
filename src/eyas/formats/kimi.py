"""Kimi K2 and K2.5 (docs/formats.md, "Kimi").

Turns are `<|im_{class}|>{label}<|im_middle|>{body}<|im_end|>` with nothing between them;
every role other than user and assistant renders under `<|im_system|>`, with the message's
`name` (or role) as the label. K2.5 declares tools in a `tool_declare` turn as TypeScript
(`tools_ts_str`), K2 as compact key-sorted JSON. Tool calls:
`<|tool_calls_section_begin|>(<|tool_call_begin|>ID<|tool_call_argument_begin|>ARGS
<|tool_call_end|>)+<|tool_calls_section_end|>` with ids `functions.NAME:N`, N counting over the
whole conversation.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from eyas.formats.base import (
    DeclarationTurn,
    ParsedCall,
    ParsedOutput,
    Turn,
    _decode,
    json_arguments,
    split_reasoning,
)

CALL_ID = re.compile(r"^functions\.([\w.\-]+):(\d+)$")
_TURN = re.compile(
    r"<\|im_(system|user|assistant)\|>(.*?)<\|im_middle\|>(.*?)(?=<\|im_end\|>|<\|im_(?:system|user|assistant)\|>|$)",
    re.DOTALL,
)
_MARKERS = (
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_system|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<think>",
    "</think>",
)


class KimiK2(DeclarationTurn):
    name: ClassVar[str] = "kimi-k2"
    stop_tokens = ("<|im_end|>", "[EOS]")
    declaration_style = "json"
    declaration_prefix = "["
    think_open = "<think>"
    think_close = "</think>"
    markers = _MARKERS
    sorts_tools = True
    known_default_system = "You are Kimi, an AI assistant created by Moonshot AI."
    # Kimi reads the `thinking` template switch, never /think text in a user turn
    foreign_switch = re.compile(r"(^|\s)/(no_)?think\b")

    @classmethod
    def matches(cls, tokenizer: Any) -> bool:
        vocab = tokenizer.get_vocab()
        template = tokenizer.chat_template or ""
        kimi = "<|im_middle|>" in vocab and "<|tool_calls_section_begin|>" in vocab
        return kimi and "tools_ts_str" not in template

    # -- rendering -------------------------------------------------------------------------

    def normalize_messages(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """Besides the base rule:
        - tool-call ids become `functions.NAME:N`, one counter over the whole conversation,
          and the matching `tool_call_id`s follow (non-canonical ids break the model);
        - `name` is dropped on messages other than tool results: the template prints it as
          the turn label, which would change the role the model sees.
        """
        out, notes = super().normalize_messages(messages)
        renamed: dict[str, str] = {}
        counter = 0
        for i, msg in enumerate(out):
            if msg.get("role") != "tool" and "name" in msg:
                msg = {k: v for k, v in msg.items() if k != "name"}
                notes.append(f"dropped name on a {msg.get('role')} message")
            if msg.get("tool_calls"):
                calls = []
                for call in msg["tool_calls"]:
                    want = f"functions.{call['function']['name']}:{counter}"
                    counter += 1
                    if call["id"] != want:
                        renamed[call["id"]] = want
                        call = {**call, "id": want}
                    calls.append(call)
                msg = {**msg, "tool_calls": calls}
            if msg.get("role") == "tool" and msg.get("tool_call_id") in renamed:
                msg = {**msg, "tool_call_id": renamed[msg["tool_call_id"]]}
            out[i] = msg
        if renamed:
            notes.append(f"{len(renamed)} tool-call ids rewritten to functions.NAME:N")
        return out, notes

    def _calls_text(self, message: dict) -> str:
        calls = message.get("tool_calls") or []
        if not calls:
            return ""
        body = "".join(
            f"<|tool_call_begin|>{c['id']}<|tool_call_argument_begin|>"
            f"{c['function']['arguments']}<|tool_call_end|>"
            for c in calls
        )
        return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"

    def completion_text(self, message: dict, thinking: bool = True) -> str:
        """K2's generation prompt ends at `<|im_middle|>`: a reasoning model opens its own
        think block."""
        reasoning = message.get("reasoning_content")
        head = f"<think>{reasoning}</think>" if reasoning else ""
        return head + (message.get("content") or "") + self._calls_text(message) + "<|im_end|>"

    # -- reading rendered prompts ----------------------------------------------------------

    def split_turns(self, text: str) -> list[Turn]:
        turns = []
        for m in _TURN.finditer(text):
            cls, label, body = m.group(1), m.group(2), m.group(3)
            if cls == "system" and label == "tool_declare":
                role = "declaration"
            elif cls == "system" and body.startswith("## Return of "):
                role = "tool"
            else:
                role = cls
            turns.append(Turn(role, label, body))
        return turns

    def kept_history_reasoning(self, history: list[dict]) -> list[str]:
        """The template keeps reasoning only after the last assistant turn without tool calls
        (the "suffix"); earlier turns render `<think></think>`."""
        split = max(
            (
                k
                for k, m in enumerate(history)
                if m.get("role") == "assistant" and not m.get("tool_calls")
            ),
            default=-1,
        )
        return [
            m["reasoning_content"]
            for m in history[split + 1 :]
            if m.get("role") == "assistant" and m.get("reasoning_content")
        ]

    # -- reading generated ids -------------------------------------------------------------

    def thinking_prompt(self, prompt_ids, tokenizer: Any) -> bool:
        open_id = self.marker_ids(tokenizer).get("<think>")
        return len(prompt_ids) > 0 and open_id is not None and int(prompt_ids[-1]) == open_id

    def parse_output(
        self, ids: list[int], tokenizer: Any, stop_ids: set[int] | None = None
    ) -> ParsedOutput:
        """Split at the marker token ids. With thinking on K2.5's prompt ends in `<think>`, so
        reasoning runs up to `</think>`, or to a tool section that starts before it (which
        ends reasoning implicitly)."""
        m = self.marker_ids(tokenizer)
        stops = stop_ids if stop_ids is not None else set(self.stop_token_ids(tokenizer))
        ids = list(ids)
        end = next((i for i, t in enumerate(ids) if t in stops), None)
        body = ids if end is None else ids[:end]
        section = m.get("<|tool_calls_section_begin|>")
        sec_at = body.index(section) if section in body else len(body)
        head, start = split_reasoning(body, m.get("<think>"), m.get("</think>"), sec_at)
        reasoning = None if head is None else _decode(tokenizer, head)
        out = ParsedOutput(reasoning, _decode(tokenizer, body[start:sec_at]), ended=end is not None)
        if sec_at == len(body):
            return out
        section_ids = body[sec_at + 1 :]
        sec_end = m.get("<|tool_calls_section_end|>")
        if sec_end in section_ids:
            trailing = section_ids[section_ids.index(sec_end) + 1 :]
            section_ids = section_ids[: section_ids.index(sec_end)]
            if trailing:
                out.malformed.append("text_after_tool_section")
        else:
            out.malformed.append("unterminated_tool_section")
        begin, arg, call_end = (
            m.get("<|tool_call_begin|>"),
            m.get("<|tool_call_argument_begin|>"),
            m.get("<|tool_call_end|>"),
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
            match = CALL_ID.match(raw_id)
            call = ParsedCall(
                raw_id,
                match.group(1) if match else None,
                int(match.group(2)) if match else None,
                _decode(tokenizer, section_ids[a + 1 : e]),
            )
            out.calls.append(json_arguments(call))
            i = e + 1
        if not out.calls and "unterminated_tool_call" not in out.malformed:
            out.malformed.append("empty_tool_section")
        return out


class KimiK25(KimiK2):
    """K2.5 (and K2.6): TypeScript declarations, `<think>` in the generation prompt."""

    name: ClassVar[str] = "kimi-k2.5"
    thinking_key = "thinking"
    declaration_style = "typescript"
    declaration_prefix = "# Tools\n\n## functions\nnamespace functions {"
    supplies_tools_ts = True
    # the current K2.5 template injects no default system prompt (the probe records it)
    known_default_system = None

    @classmethod
    def matches(cls, tokenizer: Any) -> bool:
        vocab = tokenizer.get_vocab()
        template = tokenizer.chat_template or ""
        kimi = "<|im_middle|>" in vocab and "<|tool_calls_section_begin|>" in vocab
        return kimi and "tools_ts_str" in template

    def completion_text(self, message: dict, thinking: bool = True) -> str:
        """With thinking on the prompt ends in `<think>`: the output is
        `reasoning</think>content[calls]<|im_end|>`; with it off the prompt already holds
        `<think></think>`."""
        rest = (message.get("content") or "") + self._calls_text(message) + "<|im_end|>"
        if not thinking:
            return rest
        return (message.get("reasoning_content") or "") + "</think>" + rest
