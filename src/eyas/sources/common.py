"""Shared pieces of the source converters: the error type and the builder of canonical rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from eyas.errors import EyasError
from eyas.records import RecordError
from eyas.tools.schema import ToolParseError, declared_names, make_tool_call, parse_loose_json


class ConversionError(EyasError):
    """A source row cannot be converted; `reason` is a stable snake_case code."""

    @classmethod
    def wrap(cls, exc: ToolParseError | RecordError) -> ConversionError:
        return cls(exc.reason, exc.detail)


@dataclass
class Draft:
    """A conversation being assembled from a source row.

    Tool-call ids are minted Kimi-style (`functions.NAME:N`, one counter over the whole
    conversation) for sources that carry none; tool results are linked to the oldest
    unanswered call, by name when the result names its function.
    """

    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _num_calls: int = 0
    _open: list[dict] = field(default_factory=list)

    def add(self, role: str, content: str | None, **extra) -> dict:
        msg = {"role": role, "content": content, **{k: v for k, v in extra.items() if v}}
        self.messages.append(msg)
        return msg

    def add_calls(
        self, calls: list[tuple[str, object]], content: str | None = "", ids: list | None = None
    ) -> dict:
        """One assistant message carrying `calls` = [(name, arguments)]; missing ids minted."""
        tool_calls = []
        for k, (name, arguments) in enumerate(calls):
            call_id = (ids[k] if ids else None) or f"functions.{name}:{self._num_calls}"
            call = make_tool_call(name, arguments, call_id)
            self._num_calls += 1
            tool_calls.append(call)
            self._open.append(call)
        return self.add("assistant", content, tool_calls=tool_calls)

    def add_result(self, content: str, name: str | None = None, call_id: str | None = None) -> dict:
        """A tool message answering the call `call_id`, else the oldest open call (matching
        `name` when given)."""
        if not self._open:
            raise ConversionError("orphan_tool_result", "a tool result follows no tool call")
        match = next((c for c in self._open if call_id and c["id"] == call_id), None)
        match = match or next((c for c in self._open if c["function"]["name"] == name), None)
        call = match or self._open[0]
        self._open.remove(call)
        return self.add("tool", content, tool_call_id=call["id"], name=call["function"]["name"])

    def note_undeclared_calls(self) -> None:
        names = declared_names(self.tools)
        for msg in self.messages:
            for call in msg.get("tool_calls") or []:
                fn = call["function"]["name"]
                if fn not in names:
                    self.notes.append(f"call to undeclared function {fn!r} kept")


def parse_calls(text: str) -> list[tuple[str, object]]:
    """`{"name", "arguments"}` (or a list of them) written as JSON or a Python literal;
    string arguments are parsed too.

    Raises `unparseable_tool_call` (neither JSON nor a literal), `tool_call_name_in_arguments`
    (the function name sits inside `arguments`: which key is the name is a guess, so the row
    is refused) or `tool_call_without_name`.
    """
    try:
        obj = parse_loose_json(text)
    except ToolParseError as exc:
        raise ConversionError("unparseable_tool_call", exc.detail) from exc
    calls = []
    for item in obj if isinstance(obj, list) else [obj]:
        if not isinstance(item, dict):
            raise ConversionError("unparseable_tool_call", f"call is not an object: {text[:80]!r}")
        args = item.get("arguments", {})
        if not isinstance(item.get("name"), str):
            if isinstance(args, dict) and isinstance(args.get("name"), str):
                raise ConversionError(
                    "tool_call_name_in_arguments", f"`name` inside `arguments`: {text[:80]!r}"
                )
            raise ConversionError("tool_call_without_name", f"call without name: {text[:80]!r}")
        if isinstance(args, str):
            try:
                args = parse_loose_json(args)
            except ToolParseError as exc:
                raise ConversionError("unparseable_tool_call", exc.detail) from exc
        calls.append((item["name"], args))
    return calls


def normalize_role_order(draft: Draft) -> None:
    """Make a chat's role order one every chat template renders, noting each change.

    No user turn at all: refused (`no_user_turn`), there is no prompt to answer. Assistant
    turns before the first user turn answer nothing in this row (ShareGPT's split rows start
    mid-conversation): dropped. Consecutive plain-text turns of one role: joined with a blank
    line, as a reader of the source would read them.
    """
    msgs = draft.messages
    first_user = next((i for i, m in enumerate(msgs) if m["role"] == "user"), None)
    if first_user is None:
        raise ConversionError("no_user_turn", "the conversation has no user turn")
    leading = [i for i, m in enumerate(msgs[:first_user]) if m["role"] != "system"]
    if leading:
        if any(msgs[i]["role"] != "assistant" or msgs[i].get("tool_calls") for i in leading):
            raise ConversionError("bad_role_order", "tool turns before the first user turn")
        draft.notes.append(f"{len(leading)} assistant turn(s) before the first user turn dropped")
        dropped = set(leading)
        msgs[:] = [m for i, m in enumerate(msgs) if i not in dropped]
    out: list[dict] = []
    for msg in msgs:
        prev = out[-1] if out else None
        plain = set(msg) == {"role", "content"} and isinstance(msg["content"], str)
        if (
            prev is not None
            and plain
            and prev["role"] == msg["role"] in ("user", "assistant")
            and set(prev) == {"role", "content"}
            and isinstance(prev["content"], str)
        ):
            prev["content"] = f"{prev['content']}\n\n{msg['content']}"
            draft.notes.append(f"consecutive {msg['role']} turns joined")
            continue
        out.append(msg)
    msgs[:] = out
