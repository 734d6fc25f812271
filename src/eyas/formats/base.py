"""`ModelFormat`: what eyas must know about a model family that its chat template cannot tell
(docs/formats.md). Every stage asks the format; no module outside `eyas.formats` branches on a
family name.

A format owns:
- its control tokens (`markers`) and stop tokens;
- the thinking switch (`thinking_key`) and what a thinking prompt looks like;
- the shape of a correct tool declaration, and how to find it in a rendered prompt;
- turn splitting of a decoded prompt;
- message normalisation before rendering (tool-call ids, argument types, labels);
- tool-call serialisation (`completion_text`) and parsing (`parse_output`) at marker token ids;
- which tool syntaxes written as text are foreign to it;
- which history reasoning its template keeps.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

# -- parsed output ---------------------------------------------------------------------------


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

    def to_message(self) -> dict[str, Any]:
        """The assistant message these parts make (ids kept as the model wrote them)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.calls:
            msg["tool_calls"] = [
                {
                    "id": c.raw_id,
                    "type": "function",
                    "function": {"name": c.name or c.raw_id, "arguments": c.arguments},
                }
                for c in self.calls
            ]
        return msg


@dataclass(frozen=True)
class Turn:
    """One turn of a decoded prompt: `role` is the turn class the template wrote (system, user,
    assistant, tool), `label` what it printed as the role label, `body` its text."""

    role: str
    label: str
    body: str


# -- foreign tool text -------------------------------------------------------------------------

# Tool definitions or calls written as text in a format other than the model's own. They are
# looked for only where a definition or a call can be pasted (system and user turns; assistant
# history), never in tool results, whose payloads are legitimately arbitrary JSON.
_GLAIVE_DEFINITION = re.compile(
    r"with access to the following functions|who has access to the following functions"
)
_HERMES_DEFINITION = re.compile(r"<tools>.*?</tools>", re.DOTALL)
_TEXT_CALLS = {"glaive": re.compile(r"<functioncall>"), "hermes": re.compile(r"<tool_call>")}
_TEXT_RESULTS = {
    "glaive": re.compile(r"^\s*FUNCTION RESPONSE:"),
    "hermes": re.compile(r"^\s*<tool_response>"),
}
_PY_TYPES = re.compile(
    r"^(?:(?:str|int|float|bool|list|dict|tuple)(?:,\s*optional)?|(?:List|Dict|Optional|Tuple|Union)\[.*)$"
)


def _json_objects(text: str, limit: int = 64):
    """Top-level JSON objects embedded in `text` (at most `limit` parse attempts)."""
    decoder = json.JSONDecoder()
    pos, tries = 0, 0
    while tries < limit:
        start = text.find("{", pos)
        if start < 0:
            return
        tries += 1
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        yield obj
        pos = end


def function_definition_kind(obj: Any) -> str | None:
    """'json_schema' or 'xlam_types' when `obj` is a tool definition (a function object with a
    name and parameters), else None."""
    if isinstance(obj, list):
        return next((k for o in obj if (k := function_definition_kind(o))), None)
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function") if isinstance(obj.get("function"), dict) else obj
    params = fn.get("parameters")
    if not isinstance(fn.get("name"), str) or not isinstance(params, dict):
        return None
    props = params.get("properties") if isinstance(params.get("properties"), dict) else params
    types = [p.get("type") for p in props.values() if isinstance(p, dict)]
    if any(isinstance(t, str) and _PY_TYPES.match(t) for t in types):
        return "xlam_types"
    return "json_schema"


# -- the format --------------------------------------------------------------------------------


class ModelFormat:
    """Base: a plain chat model with no known markers (the `generic` behaviour)."""

    name: ClassVar[str] = "generic"
    stop_tokens: ClassVar[tuple[str, ...]] = ()
    thinking_key: ClassVar[str | None] = None
    declaration_style: ClassVar[Literal["typescript", "json", "any"]] = "any"
    declaration_prefix: ClassVar[str | None] = None
    think_open: ClassVar[str | None] = None
    think_close: ClassVar[str | None] = None
    markers: ClassVar[tuple[str, ...]] = ()
    # eyas builds `tools_ts_str` when the template reads it and the tokenizer does not
    supplies_tools_ts: ClassVar[bool] = False
    # Kimi's tokenizer deep-sorts `tools` before rendering
    sorts_tools: ClassVar[bool] = False
    # tool syntaxes that are this format's own (not foreign when found as text)
    native_tool_text: ClassVar[frozenset[str]] = frozenset()
    # the default system prompt a template of this family may inject (probe overrides)
    known_default_system: ClassVar[str | None] = None
    # a /think-style switch written in user text that this family does not read
    foreign_switch: ClassVar[re.Pattern | None] = None
    # with thinking on, an empty reasoning is generated as `<think></think>` (GLM); elsewhere
    # an empty pair in the output is a prompt scaffold that moved into the supervised tokens
    generates_empty_think: ClassVar[bool] = False

    def __init__(self) -> None:
        self._ids: dict[int, tuple[Any, dict[str, int]]] = {}

    def __repr__(self) -> str:
        return f"<ModelFormat {self.name}>"

    # -- detection and switches ------------------------------------------------------------

    @classmethod
    def matches(cls, tokenizer: Any) -> bool:
        """True when `tokenizer` belongs to this family (the generic format matches all)."""
        return True

    def thinking_kwargs(self, thinking: bool | None) -> dict[str, Any]:
        if thinking is None or self.thinking_key is None:
            return {}
        return {self.thinking_key: thinking}

    # -- token ids -------------------------------------------------------------------------

    def marker_ids(self, tokenizer: Any) -> dict[str, int]:
        """Single-token ids of this format's markers and stop tokens, cached per tokenizer."""
        hit = self._ids.get(id(tokenizer))
        if hit is None or hit[0] is not tokenizer:
            vocab = tokenizer.get_vocab()
            names = {*self.markers, *self.stop_tokens}
            hit = (tokenizer, {m: vocab[m] for m in names if m in vocab})
            self._ids[id(tokenizer)] = hit
        return hit[1]

    def stop_token_ids(self, tokenizer: Any) -> list[int]:
        ids = self.marker_ids(tokenizer)
        stops = [ids[t] for t in self.stop_tokens if t in ids]
        if not stops and tokenizer.eos_token_id is not None:
            stops = [tokenizer.eos_token_id]
        return stops

    # -- rendering -------------------------------------------------------------------------

    def normalize_messages(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """Normalised shallow copies and the actions taken; the input is untouched.
        Base rule: `reasoning_content: None` is dropped (Jinja would print "None")."""
        out, notes = [], []
        for original in messages:
            msg = dict(original)
            if "reasoning_content" in msg and msg["reasoning_content"] is None:
                del msg["reasoning_content"]
                notes.append("dropped reasoning_content=None")
            out.append(msg)
        return out, notes

    def completion_text(self, message: dict, thinking: bool = True) -> str:
        """What the model emits after the generation prompt for assistant `message`."""
        return message.get("content") or ""

    # -- reading rendered prompts ----------------------------------------------------------

    def split_turns(self, text: str) -> list[Turn]:
        return [Turn("prompt", "prompt", text)]

    def declaration_body(self, turns: list[Turn]) -> str | None:
        """The body of the native tool declaration in a rendered prompt, or None."""
        return None

    def message_turns(self, turns: list[Turn]) -> list[Turn]:
        """The turns with the native tool declaration taken out."""
        return turns

    def declares_tools(self, turns: list[Turn], tools: list[dict]) -> bool:
        names = [t["function"]["name"] for t in tools if "function" in t]
        return any(n in t.body for t in turns for n in names)

    def foreign_tool_text(self, turns: list[Turn]) -> list[str]:
        """Kinds of tool definitions or calls written as text in a foreign format."""
        kinds: set[str] = set()
        for turn in self.message_turns(turns):
            body = turn.body
            if turn.role in ("system", "user", "prompt"):
                if _GLAIVE_DEFINITION.search(body):
                    kinds.add("glaive")
                if "hermes" not in self.native_tool_text and _HERMES_DEFINITION.search(body):
                    kinds.add("hermes")
                for obj in _json_objects(body):
                    if kind := function_definition_kind(obj):
                        kinds.add(kind)
            if turn.role in ("assistant", "prompt"):
                for kind, pattern in _TEXT_CALLS.items():
                    if kind not in self.native_tool_text and pattern.search(body):
                        kinds.add(kind)
            if turn.role in ("user", "tool", "system"):
                for kind, pattern in _TEXT_RESULTS.items():
                    if kind not in self.native_tool_text and pattern.search(body):
                        kinds.add(kind)
        return sorted(kinds)

    def system_bodies(self, turns: list[Turn]) -> list[str]:
        return [t.body for t in self.message_turns(turns) if t.role == "system"]

    def user_bodies(self, turns: list[Turn]) -> list[str]:
        return [t.body for t in turns if t.role == "user"]

    def kept_history_reasoning(self, history: list[dict]) -> list[str]:
        """Reasoning texts of `history` that the template renders (the rest it drops)."""
        return []

    # -- reading generated ids -------------------------------------------------------------

    def thinking_prompt(self, prompt_ids: list[int] | Any, tokenizer: Any) -> bool:
        """Does this prompt ask the model to reason first (so the output must close it)?"""
        return False

    def parse_output(
        self, ids: list[int], tokenizer: Any, stop_ids: set[int] | None = None
    ) -> ParsedOutput:
        """Split generated ids into reasoning, content and tool calls."""
        stops = stop_ids if stop_ids is not None else set(self.stop_token_ids(tokenizer))
        end = next((i for i, t in enumerate(ids) if t in stops), None)
        body = ids if end is None else ids[:end]
        return ParsedOutput(None, _decode(tokenizer, body), ended=end is not None)


class DeclarationTurn(ModelFormat):
    """A format that declares tools in a turn of its own, which `split_turns` labels with the
    role "declaration" (Kimi's `tool_declare`, GLM's tools system turn)."""

    def declaration_body(self, turns: list[Turn]) -> str | None:
        return next((t.body for t in turns if t.role == "declaration"), None)

    def message_turns(self, turns: list[Turn]) -> list[Turn]:
        return [t for t in turns if t.role != "declaration"]

    def declares_tools(self, turns: list[Turn], tools: list[dict]) -> bool:
        return self.declaration_body(turns) is not None


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=False) if len(ids) else ""


def split_reasoning(
    body: list[int], open_id: int | None, close_id: int | None, stop_at: int | None = None
) -> tuple[list[int] | None, int]:
    """(reasoning ids or None, index where the rest starts). Reasoning runs to `close_id`
    when it occurs before `stop_at` (a tool section ends reasoning implicitly); an opening
    `open_id` and what precedes it (GLM writes a newline first) are dropped (K2.5 puts it in
    the prompt, others in the output)."""
    limit = len(body) if stop_at is None else stop_at
    if close_id is None or close_id not in body[:limit]:
        return None, 0
    k = body.index(close_id)
    head = body[:k]
    if open_id in head:
        head = head[head.index(open_id) + 1 :]
    return head, k + 1


def parse_tagged_calls(
    ids: list[int],
    tokenizer: Any,
    markers: dict[str, int],
    stops: set[int],
    parse_call: Any,
    strip: str | None = None,
) -> ParsedOutput:
    """Output of a format whose calls are `<tool_call>...</tool_call>` blocks after optional
    reasoning and content (Qwen3, GLM-4.5): cut at the first stop id, split the reasoning, then
    hand each block's ids to `parse_call(ids, out)`. `strip`: characters stripped from the
    reasoning and content (None: whitespace)."""
    end = next((i for i, t in enumerate(ids) if t in stops), None)
    body = list(ids) if end is None else list(ids[:end])
    open_call, close_call = markers.get("<tool_call>"), markers.get("</tool_call>")
    first_call = body.index(open_call) if open_call in body else len(body)
    think_open, think_close = markers.get("<think>"), markers.get("</think>")
    head, start = split_reasoning(body, think_open, think_close, first_call)
    reasoning = None if head is None else _decode(tokenizer, head).strip(strip)
    content = _decode(tokenizer, body[start:first_call]).strip(strip)
    out = ParsedOutput(reasoning, content, ended=end is not None)
    i = first_call
    while i < len(body):
        if body[i] != open_call:
            if _decode(tokenizer, body[i : i + 1]).strip():
                out.malformed.append("text_between_calls")
            i += 1
            continue
        if close_call not in body[i:]:
            out.malformed.append("unterminated_tool_call")
            break
        e = body.index(close_call, i)
        out.calls.append(parse_call(body[i + 1 : e], out))
        i = e + 1
    return out


def json_arguments(call: ParsedCall) -> ParsedCall:
    """Fill `arguments_json` / `valid_json` from the raw argument text."""
    try:
        call.arguments_json = json.loads(call.arguments)
        call.valid_json = isinstance(call.arguments_json, dict)
    except json.JSONDecodeError:
        pass
    return call
