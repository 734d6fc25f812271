"""UltraChat (docs/formats.md): HuggingFaceH4/ultrachat_200k `messages`, or the original
stingning/ultrachat `data` list of strings alternating user and assistant."""

from __future__ import annotations

from eyas.sources.common import ConversionError, Draft

_ROLES = {"user": "user", "assistant": "assistant", "system": "system"}


def convert(row: dict) -> Draft:
    draft = Draft()
    if isinstance(row.get("data"), list):
        for i, text in enumerate(row["data"]):
            if not isinstance(text, str):
                raise ConversionError("bad_content", f"data[{i}] is not a string")
            draft.add("user" if i % 2 == 0 else "assistant", text)
    elif isinstance(row.get("messages"), list):
        for i, msg in enumerate(row["messages"]):
            role = _ROLES.get(msg.get("role", "") if isinstance(msg, dict) else "")
            if role is None:
                raise ConversionError("unknown_role", f"messages[{i}].role={msg!r:.60}")
            if not isinstance(msg.get("content"), str):
                raise ConversionError("bad_content", f"messages[{i}].content is not a string")
            draft.add(role, msg["content"])
    else:
        raise ConversionError("missing_field", "UltraChat rows need `messages` or `data`")
    if not draft.messages:
        raise ConversionError("empty_conversation", "no turns")
    return draft
