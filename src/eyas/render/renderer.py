"""Render conversations to prompt ids with the target tokenizer's own chat template.

One render function serves every stage (bug class #30): convert output goes in, the exact
`prompt_ids` that generation sends come out. eyas never writes a template for a real target;
it only supplies what the official tokenizer would (`tools_ts_str` for Kimi-K2.5 when the
tokenizer is a fast-tokenizer conversion without Moonshot's Python override).
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from eyas.errors import EyasError
from eyas.formats import ModelFormat, detect_model_format, get_model_format
from eyas.records import Conversation
from eyas.render.template import PROBE_TOOLS, DirectTemplate
from eyas.tools.schema import deep_sort
from eyas.tools.typescript import encode_tools_typescript

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "tiktoken.model",
    "tokenizer.model",
)


class RenderError(EyasError):
    """A conversation or template cannot be rendered; `reason` is a stable code."""


def load_tokenizer(model_dir: str | Path, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    path = Path(model_dir)
    if not path.is_dir():
        state = "is a file, not a folder" if path.exists() else "does not exist"
        raise RenderError("no_model", f"model directory {path} {state}")
    if not any((path / name).exists() for name in _TOKENIZER_FILES):
        raise RenderError(
            "no_tokenizer",
            f"{path} holds no tokenizer files ({', '.join(_TOKENIZER_FILES[:3])}, ...)",
        )
    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=trust_remote_code)
    except EyasError:
        raise
    except (ValueError, OSError) as exc:  # ValueError includes a malformed tokenizer JSON
        if "trust_remote_code" in str(exc) and not trust_remote_code:
            raise RenderError(
                "needs_remote_code",
                f"{path}'s tokenizer is custom code; pass --trust-remote-code if you trust it",
            ) from exc
        detail = str(exc).strip().splitlines()[0]
        raise RenderError(
            "bad_tokenizer", f"{path}: the tokenizer cannot be loaded ({detail})"
        ) from exc


def tokenizer_fingerprint(model_dir: str | Path) -> str:
    """sha256 over the tokenizer files present in the model directory."""
    digest = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        path = Path(model_dir) / name
        if path.exists():
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def template_fingerprint(template: str | None) -> str:
    return hashlib.sha256((template or "").encode()).hexdigest()


def last_assistant_index(messages: list[dict]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    return -1


def is_unanswered(message: dict) -> bool:
    """An assistant turn the source leaves for the model to write (MT-Bench's first answer,
    BFCL's turns): `content: null` with no tool calls and no reasoning. Only the model's own
    answer can stand in it, so it is never rendered as history."""
    return (
        message.get("role") == "assistant"
        and message.get("content") is None
        and not message.get("tool_calls")
        and not message.get("reasoning_content")
    )


def answer_turns(messages: list[dict]) -> list[int]:
    """Where the model answers, in order: every assistant turn, then `len(messages)` when the
    conversation ends with a user turn or a tool result (the question is the last message:
    answering at the last assistant turn instead would drop it)."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    if messages and messages[-1].get("role") in ("user", "tool"):
        turns.append(len(messages))
    return turns


def answer_turn(messages: list[dict]) -> int:
    """The turn one prompt answers (-1: after the whole conversation). The last answer turn,
    unless an earlier one is unanswered: then that one, the only turn whose whole history
    the source gives (the later ones follow the model's own answer: `multi_turn = "all"`)."""
    turns = answer_turns(messages)
    pending = next((t for t in turns if t < len(messages) and is_unanswered(messages[t])), None)
    turn = pending if pending is not None else (turns[-1] if turns else -1)
    return -1 if turn == len(messages) else turn


def has_unanswered(messages: list[dict]) -> bool:
    return any(is_unanswered(m) for m in messages)


@dataclass
class RenderedPrompt:
    prompt_ids: list[int]
    prompt_text: str
    turn: int
    notes: list[str] = field(default_factory=list)


class Renderer:
    """Renders with `apply_chat_template(messages, tools=..., add_generation_prompt=True)`,
    or with the same compiled template directly when that was verified byte-identical
    (`eyas.render.template`).

    Args:
        model_dir: local model (or tokenizer) directory.
        profile: the model format's name (`eyas.formats`); detected from the tokenizer when
            None.
        thinking: the format's thinking switch; None leaves the template default.
        trust_remote_code: passed to transformers only when the user asks (Kimi needs it).
    """

    def __init__(
        self,
        model_dir: str | Path,
        profile: str | None = None,
        thinking: bool | None = None,
        trust_remote_code: bool = False,
        tokenizer: Any = None,
    ):
        self.model_dir = Path(model_dir)
        self.tokenizer = tokenizer or load_tokenizer(model_dir, trust_remote_code)
        if not self.tokenizer.chat_template:
            raise RenderError(
                "no_chat_template",
                f"{model_dir} has no chat template (chat_template.jinja or tokenizer_config.json "
                "chat_template): eyas renders with the model's own template only",
            )
        self.model_format: ModelFormat = (
            get_model_format(profile) if profile else detect_model_format(self.tokenizer)
        )
        self.thinking = thinking
        self.template_kwargs = self.model_format.thinking_kwargs(thinking)
        # A tokenizer class that overrides apply_chat_template (Moonshot's TikTokenTokenizer)
        # builds tools_ts_str itself; a plain fast tokenizer needs eyas to supply it.
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase

        overrides = (
            type(self.tokenizer).apply_chat_template
            is not PreTrainedTokenizerBase.apply_chat_template
        )
        self.supply_tools_ts = "tools_ts_str" in self.tokenizer.chat_template and not overrides
        self._fast = getattr(self.tokenizer, "backend_tokenizer", None)
        self._split = self._special_splitter()
        self._piece_cache: dict[str, list[int]] = {}
        self._tools_cache: dict[bytes, tuple[list[dict], str | None]] = {}
        self._overrides_template = overrides
        self.fingerprint = tokenizer_fingerprint(self.model_dir)
        self.template_sha256 = template_fingerprint(self.tokenizer.chat_template)

    def with_thinking(self, thinking: bool | None) -> Renderer:
        """The same tokenizer and template with another thinking switch (a dataset config may
        mix both modes); `self` when it is already that one."""
        if thinking == self.thinking:
            return self
        other = copy.copy(self)
        other.thinking = thinking
        other.template_kwargs = self.model_format.thinking_kwargs(thinking)
        other.__dict__.pop("_direct", None)  # verified again under the new switch
        return other

    @functools.cached_property
    def _direct(self) -> DirectTemplate | None:
        """The direct render path when it is byte-identical to apply_chat_template here;
        verified on first use, so a Renderer built only for encoding or stop ids pays nothing."""
        if self._overrides_template:
            return None
        try:
            direct = DirectTemplate(self.tokenizer)
        except ImportError:  # a transformers without the private compile helper
            return None
        _, probe_ts = self._prepared_tools(PROBE_TOOLS)
        extra = {"tools_ts_str": probe_ts} if probe_ts is not None else {}
        verified = direct.verify(self.template_kwargs, extra, self.prepare_messages)
        return direct if verified else None

    def _special_splitter(self):
        """A regex that splits text at (and keeps) the special tokens, or None when the split
        would not be exact (an added token that strips neighbouring whitespace or is
        normalised)."""
        import re

        added = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
        specials = [t for t in added.values() if getattr(t, "special", False)]
        if not specials or any(t.lstrip or t.rstrip or t.normalized for t in specials):
            return None
        names = sorted((t.content for t in specials), key=len, reverse=True)
        return re.compile("(" + "|".join(re.escape(n) for n in names) + ")")

    # -- low level -------------------------------------------------------------------------

    def render_text(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **overrides: Any,
    ) -> str:
        kwargs = {**self.template_kwargs, **overrides}
        tools = tools or None
        if tools:
            tools, ts = self._prepared_tools(tools)
            if ts is not None:
                kwargs["tools_ts_str"] = ts
        if self._direct is not None:
            return self._direct.render(messages, tools, add_generation_prompt, **kwargs)
        return self.tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )

    def _prepared_tools(self, tools: list[dict]) -> tuple[list[dict], str | None]:
        """Deep-sorted tools (Kimi) and their TypeScript declaration, cached per tool set:
        datasets reuse a few tool sets across many rows."""
        key = orjson.dumps([self.supply_tools_ts, tools], option=orjson.OPT_SORT_KEYS)
        hit = self._tools_cache.get(key)
        if hit is None:
            prepared = deep_sort(tools) if self.model_format.sorts_tools else tools
            ts = None
            if self.supply_tools_ts:
                try:
                    ts = encode_tools_typescript(prepared)
                except Exception as exc:
                    # Where the official encoder fails, its tokenizer declares the tools as
                    # JSON, which the model was not trained on; eyas rejects the row instead.
                    raise RenderError(
                        "tool_declaration_fallback", f"TypeScript encoder: {exc}"
                    ) from exc
            hit = (prepared, ts)
            if len(self._tools_cache) < 4096:
                self._tools_cache[key] = hit
        return hit

    def encode(self, text: str) -> list[int]:
        # Exactly what apply_chat_template(tokenize=True) does with the rendered string. A fast
        # tokenizer is called directly: transformers' __call__ goes through encode_batch, whose
        # per-call overhead was half of convert+render time (bench_convert_render).
        if self._fast is None:
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        # transformers toggles this flag on the shared Rust tokenizer for split_special_tokens
        # calls and may leave it set; marker strings in a rendered prompt are special tokens.
        self._fast.encode_special_tokens = False
        if self._split is None:
            return self._fast.encode(text, add_special_tokens=False).ids
        # Special tokens are atomic (no lstrip/rstrip), so the text encodes as the
        # concatenation of its pieces between them; repeated pieces (tool declarations,
        # system prompts, role labels) are encoded once.
        ids: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            cached = self._piece_cache.get(piece)
            if cached is None:
                cached = self._fast.encode(piece, add_special_tokens=False).ids
                if len(piece) > 16 and len(self._piece_cache) < 65536:
                    self._piece_cache[piece] = cached
            ids.extend(cached)
        return ids

    def stop_token_ids(self) -> list[int]:
        return self.model_format.stop_token_ids(self.tokenizer)

    # -- conversations ---------------------------------------------------------------------

    def prepare_messages(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """The format's normalisation (ids, None reasoning, labels, argument types) on a copy."""
        return self.model_format.normalize_messages(messages)

    def prepare(self, conv: Conversation) -> tuple[list[dict], list[str]]:
        return self.prepare_messages(conv.messages)

    def render_turn(
        self, messages: list[dict], tools: list[dict], turn: int, notes: list[str]
    ) -> RenderedPrompt:
        """Prompt for generating `messages[turn]` (-1: the whole conversation as prompt)."""
        history = messages if turn < 0 else messages[:turn]
        if not history:
            raise RenderError("empty_prompt", "nothing precedes the assistant turn")
        text = self.render_text(history, tools, add_generation_prompt=True)
        expected = self.model_format.declaration_prefix
        if tools and expected and expected not in text:
            # The tokenizer fell back to another declaration form (Moonshot's prints "Failed to
            # convert tools to TypeScript style" and renders JSON): off-distribution prompt.
            raise RenderError(
                "tool_declaration_fallback",
                f"the rendered prompt does not declare the tools as {self.model_format.name} "
                f"does ({expected!r})",
            )
        return RenderedPrompt(self.encode(text), text, turn, notes)

    def render_conversation(self, conv: Conversation) -> RenderedPrompt:
        """Prompt for the conversation's answer turn (`answer_turn`): its last assistant turn,
        or the end when it ends with a user turn or a tool result (docs/architecture.md)."""
        messages, notes = self.prepare(conv)
        return self.render_turn(messages, conv.tools, answer_turn(messages), notes)

    def describe(self) -> dict:
        """Render provenance for manifests."""
        return {
            "model_dir": str(self.model_dir),
            "profile": self.model_format.name,
            "tokenizer_class": type(self.tokenizer).__name__,
            "tokenizer_sha256": self.fingerprint,
            "template_sha256": self.template_sha256,
            "template_kwargs": dict(self.template_kwargs),
            "tools_ts_str_supplied_by_eyas": self.supply_tools_ts,
            # direct: the compiled template rendered by eyas, verified byte-identical to
            # apply_chat_template at start-up (eyas.render.template)
            "template_render_path": "direct" if self._direct else "apply_chat_template",
            "stop_token_ids": self.stop_token_ids(),
        }
