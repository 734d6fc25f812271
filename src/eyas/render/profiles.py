"""Model profiles: what a chat template cannot tell eyas (design.md §5).

A profile holds stop tokens, the thinking switch name, the native tool-call format and id
convention, the reasoning markers, and what a correct tool declaration looks like. Profiles
are looked up by exact name; `detect_profile` picks one from the tokenizer's vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Profile:
    name: str
    stop_tokens: tuple[str, ...]
    thinking_key: str | None
    template_kwargs: frozenset[str]
    tool_call_ids: Literal["kimi", "keep"]
    tool_parser: Literal["kimi_k2", "hermes", "none"]
    declaration: Literal["typescript", "json", "any"]
    declaration_prefix: str | None
    think_open: str | None
    think_close: str | None
    # Kimi renders `message.name` as the turn label, so `name` on a non-tool message changes
    # the role the model sees (formats.md §2.4).
    name_is_label: bool
    markers: tuple[str, ...]
    tools_ts_str: bool = False

    def thinking_kwargs(self, thinking: bool | None) -> dict[str, Any]:
        if thinking is None or self.thinking_key is None:
            return {}
        return {self.thinking_key: thinking}


_KIMI_MARKERS = (
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
_QWEN_MARKERS = (
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

PROFILES: dict[str, Profile] = {
    "kimi-k2.5": Profile(
        name="kimi-k2.5",
        stop_tokens=("<|im_end|>", "[EOS]"),
        thinking_key="thinking",
        template_kwargs=frozenset({"thinking", "preserve_thinking"}),
        tool_call_ids="kimi",
        tool_parser="kimi_k2",
        declaration="typescript",
        declaration_prefix="# Tools\n\n## functions\nnamespace functions {",
        think_open="<think>",
        think_close="</think>",
        name_is_label=True,
        markers=_KIMI_MARKERS,
        tools_ts_str=True,
    ),
    "kimi-k2": Profile(
        name="kimi-k2",
        stop_tokens=("<|im_end|>", "[EOS]"),
        thinking_key=None,
        template_kwargs=frozenset(),
        tool_call_ids="kimi",
        tool_parser="kimi_k2",
        declaration="json",
        declaration_prefix="[",
        think_open="<think>",
        think_close="</think>",
        name_is_label=True,
        markers=_KIMI_MARKERS,
    ),
    "qwen3": Profile(
        name="qwen3",
        stop_tokens=("<|im_end|>", "<|endoftext|>"),
        thinking_key="enable_thinking",
        template_kwargs=frozenset({"enable_thinking"}),
        tool_call_ids="keep",
        tool_parser="hermes",
        declaration="json",
        declaration_prefix="# Tools\n\nYou may call one or more functions",
        think_open="<think>",
        think_close="</think>",
        name_is_label=False,
        markers=_QWEN_MARKERS,
    ),
    "generic": Profile(
        name="generic",
        stop_tokens=(),
        thinking_key=None,
        template_kwargs=frozenset(),
        tool_call_ids="keep",
        tool_parser="none",
        declaration="any",
        declaration_prefix=None,
        think_open=None,
        think_close=None,
        name_is_label=False,
        markers=(),
    ),
}


class ProfileError(ValueError):
    pass


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}") from None


def detect_profile(tokenizer: Any) -> Profile:
    """Kimi if its control tokens are in the vocabulary (K2.5 if the template reads
    `tools_ts_str`), Qwen3 if `<|im_start|>` and `<tool_call>` are, else generic."""
    vocab = tokenizer.get_vocab()
    template = tokenizer.chat_template or ""
    if "<|im_middle|>" in vocab and "<|tool_calls_section_begin|>" in vocab:
        return PROFILES["kimi-k2.5" if "tools_ts_str" in template else "kimi-k2"]
    if "<|im_start|>" in vocab and "<tool_call>" in vocab:
        return PROFILES["qwen3"]
    return PROFILES["generic"]
