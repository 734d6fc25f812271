"""Per-profile normalisation of canonical messages before rendering (formats.md §8.5)."""

from __future__ import annotations

from eyas.render.profiles import Profile


def normalize_messages(messages: list[dict], profile: Profile) -> tuple[list[dict], list[str]]:
    """Return normalised copies of the messages and the actions taken; the input is untouched.

    - Kimi: tool-call ids become `functions.NAME:N` with one counter over the whole
      conversation, and the matching `tool_call_id`s are rewritten (formats.md §3.2).
    - `reasoning_content: None` is dropped (Jinja would render the text "None").
    - `name` is dropped on non-tool messages where the template turns it into a role label.

    Copies are shallow below the message level except for rewritten tool calls: a deep copy
    was a fifth of render time, and nothing downstream mutates messages (the Jinja sandbox
    is immutable).
    """
    out: list[dict] = []
    notes: list[str] = []
    renamed: dict[str, str] = {}
    counter = 0
    for original in messages:
        msg = dict(original)
        if "reasoning_content" in msg and msg["reasoning_content"] is None:
            del msg["reasoning_content"]
            notes.append("dropped reasoning_content=None")
        if profile.name_is_label and msg.get("role") != "tool" and "name" in msg:
            del msg["name"]
            notes.append(f"dropped name on a {msg.get('role')} message")
        if profile.tool_call_ids == "kimi" and msg.get("tool_calls"):
            calls = []
            for call in msg["tool_calls"]:
                want = f"functions.{call['function']['name']}:{counter}"
                counter += 1
                if call["id"] != want:
                    renamed[call["id"]] = want
                    call = {**call, "id": want}
                calls.append(call)
            msg["tool_calls"] = calls
        if msg.get("role") == "tool" and msg.get("tool_call_id") in renamed:
            msg["tool_call_id"] = renamed[msg["tool_call_id"]]
        out.append(msg)
    if renamed:
        notes.append(f"{len(renamed)} tool-call ids rewritten to functions.NAME:N")
    return out, notes
