"""The tokenizer's chat template rendered directly, without transformers' per-call overhead.

`apply_chat_template(tokenize=False)` deep-walks every message, the tools and the keyword
arguments to rebuild them from plain JSON types before rendering (`_plain_template_data`), and
deep-copies again to drop None keys. For canonical conversations, which are plain JSON already,
that was half of render time (bench_convert_render). `DirectTemplate` renders the same compiled
template in the same sandbox with the same variables, copying only the top level.

It reproduces the transformers version it was checked against; `verify` renders probe
conversations both ways and the Renderer uses the direct path only when every probe is
byte-identical, so a transformers upgrade that changes the preprocessing falls back instead of
silently rendering differently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# transformers fills `reasoning_content` from these names and copies it to `thinking`
# (gpt-oss templates read that); the order is transformers' own.
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "days": {"type": "integer", "minimum": 1, "default": 1},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                },
                "required": ["city"],
            },
        },
    }
]

_PROBE_CONVERSATIONS: list[list[dict]] = [
    [{"role": "user", "content": "Hi there"}],
    [
        {"role": "system", "content": "You are terse.", "name": None},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Call the tool.",
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "functions.get_weather:0",
            "name": "get_weather",
            "content": '{"temp": -3}',
        },
        {"role": "assistant", "content": "-3 C.", "reasoning_content": None},
        {"role": "user", "content": "Thanks", "reasoning": "stray"},
    ],
]


class DirectTemplate:
    """Renders `tokenizer`'s chat template like `apply_chat_template(tokenize=False)`."""

    def __init__(self, tokenizer: Any):
        from transformers.utils.chat_template_utils import _compile_jinja_template

        self._tokenizer = tokenizer
        self._compile = _compile_jinja_template
        self._compiled: dict[bool, Any] = {}
        self._specials = dict(tokenizer.special_tokens_map)

    def _template(self, with_tools: bool) -> Any:
        compiled = self._compiled.get(with_tools)
        if compiled is None:
            source = self._tokenizer.get_chat_template(None, [{}] if with_tools else None)
            compiled = self._compiled[with_tools] = self._compile(source)
        return compiled

    def render(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        add_generation_prompt: bool,
        **kwargs: Any,
    ) -> str:
        chat = []
        for message in messages:
            message = {k: v for k, v in message.items() if v is not None}
            reasoning = next((message[k] for k in _REASONING_FIELDS if k in message), None)
            if reasoning is not None:
                message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
            chat.append(message)
        return self._template(tools is not None).render(
            messages=chat,
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **{**self._specials, **kwargs},
        )

    def verify(
        self,
        template_kwargs: dict[str, Any],
        extra: dict[str, Any],
        prepare: Callable[[list[dict]], tuple[list[dict], list[str]]] = lambda m: (m, []),
    ) -> bool:
        """True when every probe renders byte-identically to `apply_chat_template` (and at
        least one probe rendered at all)."""
        compared = 0
        for raw in _PROBE_CONVERSATIONS:
            messages, _ = prepare(raw)  # the model format's normalisation, as rendering does
            for tools in (None, PROBE_TOOLS):
                for gen in (True, False):
                    kwargs = {**template_kwargs, **(extra if tools else {})}
                    try:
                        want = self._tokenizer.apply_chat_template(
                            messages,
                            tools=tools,
                            add_generation_prompt=gen,
                            tokenize=False,
                            **kwargs,
                        )
                    except Exception:  # a template may reject a probe shape
                        continue
                    try:
                        got = self.render(messages, tools, gen, **kwargs)
                    except Exception:
                        return False
                    if got != want:
                        return False
                    compared += 1
        return compared > 0
