"""Helpers to build clean and broken audit samples (imported by the audit tests)."""

from __future__ import annotations

import json

from eyas.records import Sample
from eyas.render.renderer import last_assistant_index
from eyas.toy.train import completion_text


def make_sample(renderer, conv, messages=None, tools=None, **overrides) -> Sample:
    messages = messages if messages is not None else conv.messages
    tools = conv.tools if tools is None else tools
    prepared, _ = renderer.prepare_messages(messages)
    turn = last_assistant_index(prepared)
    prompt = renderer.encode(renderer.render_text(prepared[:turn], tools))
    output = renderer.encode(completion_text(prepared[turn]))
    s = Sample(
        id=conv.id,
        dataset=conv.dataset,
        prompt_ids=prompt,
        output_ids=output,
        finish_reason="stop",
        matched_stop=output[-1],
        messages=messages,
        tools=tools,
        backend="sglang",
        sampling={"temperature": 0.0, "max_new_tokens": 512},
        turn=turn,
    )
    for k, v in overrides.items():
        setattr(s, k, v)
    return s


def write_jsonl(path, samples):
    path.write_text("\n".join(json.dumps(s.to_dict()) for s in samples) + "\n")
    return path


def glaive_tool_convs(convs):
    return [c for c in convs if c.dataset == "b1_glaive" and c.tools]
