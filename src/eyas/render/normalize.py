"""Per-profile normalisation of canonical messages before rendering (formats.md §8.5)."""

from __future__ import annotations

import copy

from eyas.render.profiles import Profile


def normalize_messages(messages: list[dict], profile: Profile) -> tuple[list[dict], list[str]]:
    """Return a normalised deep copy and the actions taken.

    - Kimi: tool-call ids become `functions.NAME:N` with one counter over the whole
      conversation, and the matching `tool_call_id`s are rewritten (formats.md §3.2).
    - `reasoning_content: None` is dropped (Jinja would render the text "None").
    - `name` is dropped on non-tool messages where the template turns it into a role label.
    """
    out = copy.deepcopy(messages)
    notes: list[str] = []
    renamed: dict[str, str] = {}
    counter = 0
    for msg in out:
        if "reasoning_content" in msg and msg["reasoning_content"] is None:
            del msg["reasoning_content"]
            notes.append("dropped reasoning_content=None")
        if profile.name_is_label and msg.get("role") != "tool" and "name" in msg:
            del msg["name"]
            notes.append(f"dropped name on a {msg.get('role')} message")
        if profile.tool_call_ids == "kimi":
            for call in msg.get("tool_calls") or []:
                want = f"functions.{call['function']['name']}:{counter}"
                counter += 1
                if call["id"] != want:
                    renamed[call["id"]] = want
                    call["id"] = want
        if msg.get("role") == "tool" and msg.get("tool_call_id") in renamed:
            msg["tool_call_id"] = renamed[msg["tool_call_id"]]
    if renamed:
        notes.append(f"{len(renamed)} tool-call ids rewritten to functions.NAME:N")
    return out, notes
