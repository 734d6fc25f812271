"""Reference samples: what a perfect K2.5-style target would return for a conversation's last
assistant turn (prompt rendered natively; output = the reference completion's tokens). Used by
tests and benchmarks that need clean, realistic samples without running a model."""

from __future__ import annotations

from eyas.records import Conversation, Sample
from eyas.render.renderer import Renderer, last_assistant_index


def reference_sample(
    renderer: Renderer,
    conv: Conversation,
    messages: list[dict] | None = None,
    tools: list[dict] | None = None,
) -> Sample:
    """`messages`/`tools` override the conversation's (to plant rendering bugs in tests)."""
    messages = conv.messages if messages is None else messages
    tools = conv.tools if tools is None else tools
    prepared, _ = renderer.prepare_messages(messages)
    turn = last_assistant_index(prepared)
    prompt = renderer.encode(renderer.render_text(prepared[:turn], tools))
    thinking = renderer.thinking is not False
    output = renderer.encode(renderer.model_format.completion_text(prepared[turn], thinking))
    return Sample(
        id=conv.id,
        dataset=conv.dataset,
        prompt_ids=prompt,
        output_ids=output,
        finish_reason="stop",
        matched_stop=output[-1],
        messages=messages,
        tools=tools,
        backend="reference",  # rendered by the template, not sampled by an engine
        sampling={"temperature": 0.0, "max_new_tokens": 512},
        turn=turn,
    )
