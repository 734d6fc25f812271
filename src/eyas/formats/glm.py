"""GLM-4.5 (zai-org/GLM-4.5 `chat_template.jinja`; docs/formats.md, "GLM-4.5").

The prompt opens with `[gMASK]<sop>`; tools are declared in a first `<|system|>` turn as one
JSON object per line inside `<tools>`; each turn starts with its role token (`<|system|>`,
`<|user|>`, `<|assistant|>`, `<|observation|>` for tool results) and has no end token: the
model ends its turn by emitting the next role token, `<|user|>` or `<|observation|>`. Calls are
XML-ish: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>`,
string values raw and others JSON, so the template needs `arguments` as an object. Thinking
is on unless `enable_thinking=False`, which appends `\\n<think></think>` to the generation
prompt (and `/nothink` to user turns).
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from eyas.formats.base import (
    DeclarationTurn,
    ParsedCall,
    ParsedOutput,
    Turn,
    _decode,
    parse_tagged_calls,
)

_ROLE_TOKENS = {
    "<|system|>": "system",
    "<|user|>": "user",
    "<|assistant|>": "assistant",
    "<|observation|>": "tool",
}
_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in _ROLE_TOKENS) + ")")


class Glm45(DeclarationTurn):
    name: ClassVar[str] = "glm-4.5"
    stop_tokens = ("<|endoftext|>", "<|user|>", "<|observation|>")
    thinking_key = "enable_thinking"
    declaration_style = "json"
    declaration_prefix = "\n# Tools\n\nYou may call one or more functions"
    think_open = "<think>"
    think_close = "</think>"
    markers = (
        "[gMASK]",
        "<sop>",
        *_ROLE_TOKENS,
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<tool_response>",
        "</tool_response>",
    )
    native_tool_text = frozenset({"hermes"})
    generates_empty_think = True

    @classmethod
    def matches(cls, tokenizer: Any) -> bool:
        vocab = tokenizer.get_vocab()
        return "<|observation|>" in vocab and "<arg_key>" in vocab

    def normalize_messages(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """The template iterates `arguments.items()`: JSON-string arguments become objects."""
        out, notes = super().normalize_messages(messages)
        decoded = 0
        for i, msg in enumerate(out):
            calls = msg.get("tool_calls")
            if not calls:
                continue
            new = []
            for call in calls:
                args = call["function"].get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        args = {"raw_arguments": args}
                    call = {**call, "function": {**call["function"], "arguments": args}}
                    decoded += 1
                new.append(call)
            out[i] = {**msg, "tool_calls": new}
        if decoded:
            notes.append(f"{decoded} tool-call arguments decoded to objects for the template")
        return out, notes

    def completion_text(self, message: dict, thinking: bool = True) -> str:
        text = ""
        if thinking:
            text += f"\n<think>{(message.get('reasoning_content') or '').strip()}</think>"
        content = (message.get("content") or "").strip()
        if content:
            text += "\n" + content
        calls = message.get("tool_calls") or []
        for call in calls:
            fn = call["function"]
            args = fn["arguments"]
            args = json.loads(args) if isinstance(args, str) else args
            text += "\n<tool_call>" + fn["name"] + "\n"
            for k, v in args.items():
                value = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
                text += f"<arg_key>{k}</arg_key>\n<arg_value>{value}</arg_value>\n"
            text += "</tool_call>"
        return text + ("<|observation|>" if calls else "<|user|>")

    def split_turns(self, text: str) -> list[Turn]:
        pieces = _SPLIT.split(text)
        turns = []
        for token, body in zip(pieces[1::2], pieces[2::2]):
            role = _ROLE_TOKENS[token]
            if role == "system" and body.startswith("\n# Tools\n\nYou may call one or more"):
                role = "declaration"
            turns.append(Turn(role, token, body))
        return turns

    def kept_history_reasoning(self, history: list[dict]) -> list[str]:
        last_user = max((k for k, m in enumerate(history) if m.get("role") == "user"), default=-1)
        return [
            m["reasoning_content"].strip()
            for m in history[last_user + 1 :]
            if m.get("role") == "assistant" and m.get("reasoning_content")
        ]

    def thinking_prompt(self, prompt_ids, tokenizer: Any) -> bool:
        assistant = self.marker_ids(tokenizer).get("<|assistant|>")
        return len(prompt_ids) > 0 and int(prompt_ids[-1]) == assistant

    def parse_output(
        self, ids: list[int], tokenizer: Any, stop_ids: set[int] | None = None
    ) -> ParsedOutput:
        m = self.marker_ids(tokenizer)
        stops = stop_ids if stop_ids is not None else set(self.stop_token_ids(tokenizer))
        return parse_tagged_calls(
            ids, tokenizer, m, stops, lambda body, out: self._call(body, tokenizer, m, out)
        )

    def _call(self, ids: list[int], tokenizer: Any, m: dict, out: ParsedOutput) -> ParsedCall:
        key_open, key_close = m.get("<arg_key>"), m.get("</arg_key>")
        value_open, value_close = m.get("<arg_value>"), m.get("</arg_value>")
        name_end = ids.index(key_open) if key_open in ids else len(ids)
        name = _decode(tokenizer, ids[:name_end]).strip()
        args: dict[str, Any] = {}
        valid = bool(name)
        i = name_end
        while i < len(ids):
            if ids[i] != key_open:
                i += 1
                continue
            try:
                kc = ids.index(key_close, i)
                vo = ids.index(value_open, kc)
                vc = ids.index(value_close, vo)
            except ValueError:
                out.malformed.append("unterminated_argument")
                valid = False
                break
            key = _decode(tokenizer, ids[i + 1 : kc])
            raw = _decode(tokenizer, ids[vo + 1 : vc])
            try:  # the template writes non-string values as JSON and strings raw
                args[key] = json.loads(raw)
            except json.JSONDecodeError:
                args[key] = raw
            i = vc + 1
        return ParsedCall(
            name, name or None, None, json.dumps(args, ensure_ascii=False), args, valid
        )
