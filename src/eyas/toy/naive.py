"""The naive (Glaive-style) rendering eyas exists to catch: tool schemas pasted as raw JSON
into the system prompt instead of being passed as structured `tools=`."""

from __future__ import annotations

import json

GLAIVE_TOOL_SENTENCE = (
    "You are a helpful assistant with access to the following functions. Use them if required -"
)


def naive_glaive_messages(messages: list[dict], tools: list[dict]) -> list[dict]:
    """Messages with every tool schema pasted into the system turn as pretty-printed JSON."""
    schemas = "\n\n".join(json.dumps(t["function"], indent=4) for t in tools)
    rest = [m for m in messages if m["role"] != "system"]
    return [{"role": "system", "content": f"{GLAIVE_TOOL_SENTENCE}\n{schemas}"}, *rest]
