"""Qwen3 hybrid (docs/formats.md, "Qwen3").

Turns are `<|im_start|>{role}\\n{content}<|im_end|>\\n`. Tools are declared inside the one
system turn (`# Tools ... <tools>JSON lines</tools> ...`), calls are
`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>` blocks after the content, and
tool results merge into a user turn of `<tool_response>` blocks. The thinking switch is
`enable_thinking`; with it off the generation prompt already holds `<think>\\n\\n</think>\\n\\n`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from eyas.formats.base import (
    ModelFormat,
    ParsedCall,
    ParsedOutput,
    Turn,
    _decode,
    parse_tagged_calls,
)

_DECLARATION = re.compile(
    r"# Tools\n\nYou may call one or more functions.*?</tool_call>(?=$)", re.DOTALL
)


class Qwen3(ModelFormat):
    name: ClassVar[str] = "qwen3"
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    thinking_key = "enable_thinking"
    declaration_style = "json"
    declaration_prefix = "# Tools\n\nYou may call one or more functions"
    think_open = "<think>"
    think_close = "</think>"
    markers = (
        "<|im_start|>",
        "<|im_end|>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    )
    # its own declaration is a <tools> block and its calls/results are these tags
    native_tool_text = frozenset({"hermes"})

    @classmethod
    def matches(cls, tokenizer: Any) -> bool:
        vocab = tokenizer.get_vocab()
        return "<|im_start|>" in vocab and "<tool_call>" in vocab

    def completion_text(self, message: dict, thinking: bool = True) -> str:
        content = (message.get("content") or "").lstrip("\n")
        text = ""
        if thinking:
            reasoning = (message.get("reasoning_content") or "").strip("\n")
            text = f"<think>\n{reasoning}\n</think>\n\n"
        text += content
        for k, call in enumerate(message.get("tool_calls") or []):
            if k or content:
                text += "\n"
            fn = call["function"]
            args = fn["arguments"]
            args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            text += f'<tool_call>\n{{"name": "{fn["name"]}", "arguments": {args}}}\n</tool_call>'
        return text + "<|im_end|>"

    def split_turns(self, text: str) -> list[Turn]:
        turns = []
        for chunk in text.split("<|im_start|>")[1:]:
            label, _, body = chunk.partition("\n")
            body = body.split("<|im_end|>")[0]
            role = label
            if label == "user" and body.startswith("\n<tool_response>"):
                role = "tool"
            turns.append(Turn(role, label, body))
        return turns

    def declaration_body(self, turns: list[Turn]) -> str | None:
        for t in turns:
            if t.role == "system" and (m := re.search(_DECLARATION.pattern, t.body, re.DOTALL)):
                return m.group(0)
        return None

    def message_turns(self, turns: list[Turn]) -> list[Turn]:
        out = []
        for t in turns:
            if t.role == "system":
                t = Turn(t.role, t.label, re.sub(_DECLARATION, "", t.body).rstrip("\n"))
            out.append(t)
        return out

    def declares_tools(self, turns: list[Turn], tools: list[dict]) -> bool:
        return self.declaration_body(turns) is not None

    def kept_history_reasoning(self, history: list[dict]) -> list[str]:
        """Reasoning survives only on assistant turns after the last real user query."""
        last_query = max(
            (
                k
                for k, m in enumerate(history)
                if m.get("role") == "user"
                and isinstance(m.get("content"), str)
                and not m["content"].startswith("<tool_response>")
            ),
            default=-1,
        )
        return [
            m["reasoning_content"].strip("\n")
            for m in history[last_query + 1 :]
            if m.get("role") == "assistant" and m.get("reasoning_content")
        ]

    def thinking_prompt(self, prompt_ids, tokenizer: Any) -> bool:
        """Thinking is on unless the prompt ends in the empty `<think>\\n\\n</think>\\n\\n`."""
        close = self.marker_ids(tokenizer).get("</think>")
        start = self.marker_ids(tokenizer).get("<|im_start|>")
        tail = [int(t) for t in prompt_ids[-4:]]
        if close in tail:
            return False
        # the generation prompt is `<|im_start|>assistant\n`: a handful of ids after im_start
        return start in [int(t) for t in prompt_ids[-4:]]

    def parse_output(
        self, ids: list[int], tokenizer: Any, stop_ids: set[int] | None = None
    ) -> ParsedOutput:
        stops = stop_ids if stop_ids is not None else set(self.stop_token_ids(tokenizer))

        def parse_call(body: list[int], out: ParsedOutput) -> ParsedCall:
            text = _decode(tokenizer, body).strip()
            call = ParsedCall(text, None, None, "")
            try:
                obj = json.loads(text)
                call.name = obj.get("name") if isinstance(obj.get("name"), str) else None
                call.raw_id = call.name or text
                args = obj.get("arguments", {})
                call.arguments_json = args
                call.arguments = args if isinstance(args, str) else json.dumps(args)
                call.valid_json = isinstance(args, dict)
            except (json.JSONDecodeError, AttributeError):
                out.malformed.append("unparseable_tool_call")
            return call

        return parse_tagged_calls(
            ids, tokenizer, self.marker_ids(tokenizer), stops, parse_call, strip="\n"
        )
