"""Record types handed between stages, and their JSON form.

Messages follow the OpenAI chat shape (plain dicts):
    {"role", "content", "reasoning_content"?, "tool_calls"?, "tool_call_id"?, "name"?}
with `tool_calls[i] = {"id", "type": "function", "function": {"name", "arguments": <JSON str>}}`.
Tools are OpenAI tool objects: `{"type": "function", "function": {"name", "description",
"parameters": <JSON Schema>}}`.

Mask convention, stated once: in every `*_mask`, 1 means "trained" (supervised).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from eyas.errors import EyasError

SCHEMA_VERSION = 1

ROLES = ("system", "user", "assistant", "tool")
FINISH_REASONS = ("stop", "length", "abort")


class RecordError(EyasError):
    """A record or input is malformed or missing; `reason` is a stable snake_case code."""


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes (sorted keys) used for ids and fingerprints."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def conversation_id(dataset: str, messages: list[dict], tools: list[dict]) -> str:
    """Stable id: sha256 of the dataset name and canonical content (minted once, in convert)."""
    digest = hashlib.sha256()
    digest.update(dataset.encode())
    digest.update(b"\0")
    digest.update(canonical_json({"messages": messages, "tools": tools}))
    return digest.hexdigest()[:32]


def validate_messages(messages: list[dict], tools: list[dict]) -> None:
    """Check the seam between sources and render; raise RecordError naming the field."""
    if not messages:
        raise RecordError("empty_conversation", "no messages")
    open_calls: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ROLES:
            raise RecordError("unknown_role", f"messages[{i}].role={role!r}")
        content = msg.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RecordError("bad_content", f"messages[{i}].content is {type(content).__name__}")
        for j, call in enumerate(msg.get("tool_calls") or []):
            fn = call.get("function") or {}
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise RecordError("bad_tool_call", f"messages[{i}].tool_calls[{j}] has no name")
            if not isinstance(fn.get("arguments"), str):
                raise RecordError(
                    "bad_tool_call", f"messages[{i}].tool_calls[{j}].arguments is not a string"
                )
            if not call.get("id"):
                raise RecordError("bad_tool_call", f"messages[{i}].tool_calls[{j}] has no id")
            open_calls.add(call["id"])
        if role == "tool" and msg.get("tool_call_id") not in open_calls:
            raise RecordError(
                "orphan_tool_result",
                f"messages[{i}].tool_call_id={msg.get('tool_call_id')!r} answers no earlier call",
            )
    for k, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
            raise RecordError("bad_tool_schema", f"tools[{k}] is not an OpenAI function tool")


@dataclass(frozen=True)
class Conversation:
    """A canonical conversation produced by `eyas convert`."""

    id: str
    dataset: str
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    source: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        dataset: str,
        messages: list[dict],
        tools: list[dict],
        source: dict,
        notes: list[str],
    ) -> Conversation:
        validate_messages(messages, tools)
        return cls(
            conversation_id(dataset, messages, tools), dataset, messages, tools, source, notes
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> Conversation:
        missing = [k for k in ("id", "dataset", "messages") if k not in row]
        if missing:
            raise RecordError("missing_field", f"conversation lacks {missing}; has {sorted(row)}")
        return cls(
            id=row["id"],
            dataset=row["dataset"],
            messages=row["messages"],
            tools=row.get("tools") or [],
            source=row.get("source") or {},
            notes=row.get("notes") or [],
        )


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: the exact ids eyas sends for one assistant turn."""

    id: str
    dataset: str
    turn: int
    prompt_ids: list[int]
    render: dict


@dataclass
class Sample:
    """One generated row. `prompt_ids + output_ids` is the training sequence, token for token.

    For multi-turn regeneration (`all`), `prompt_ids` holds the first prompt, `output_ids` the
    rest of the full sequence, and `loss_mask` (len == len(output_ids)) marks the regenerated
    tokens; for single-turn samples `loss_mask` is None and every output token is supervised.
    """

    id: str
    dataset: str
    prompt_ids: list[int]
    output_ids: list[int]
    finish_reason: str | None  # stop | length | abort; None when the producer recorded none
    matched_stop: int | str | None = None
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    backend: str = ""
    sampling: dict = field(default_factory=dict)
    attempts: int = 1
    latency_s: float = 0.0
    loss_mask: list[int] | None = None
    turn: int = -1

    def supervised_mask(self) -> list[int]:
        """1 for each output token that is trained."""
        if self.loss_mask is not None:
            return self.loss_mask
        return [1] * len(self.output_ids)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, row: dict) -> Sample:
        missing = [k for k in ("id", "prompt_ids", "output_ids") if k not in row]
        if missing:
            raise RecordError("missing_field", f"sample lacks {missing}; has {sorted(row)}")
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in row.items() if k in names and v is not None}
        kwargs.setdefault("dataset", "default")
        kwargs.setdefault("finish_reason", None)
        if isinstance(kwargs.get("sampling"), str):
            kwargs["sampling"] = orjson.loads(kwargs["sampling"])
        for key in ("messages", "tools"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = orjson.loads(kwargs[key])
        if kwargs["finish_reason"] not in (*FINISH_REASONS, None):
            raise RecordError("bad_finish_reason", f"{kwargs['finish_reason']!r}")
        return cls(**kwargs)


@dataclass(frozen=True)
class RowError:
    """A source row that could not be converted."""

    row: int
    reason: str
    detail: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RequestError:
    """A generation request that failed permanently."""

    id: str
    reason: str
    detail: str
    attempts: int = 0
    dataset: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
