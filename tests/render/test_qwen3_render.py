"""Qwen3 profile: golden strings written by hand from the Qwen3 template (docs/formats.md)."""

from eyas.records import Conversation
from eyas.render import Renderer, probe_template

TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "description": "d",
        "parameters": {"type": "object", "properties": {}},
    },
}


def test_qwen3_tools_calls_results_and_thinking_switch(qwen_dir):
    r = Renderer(qwen_dir, thinking=False)
    assert r.model_format.name == "qwen3" and r.template_kwargs == {"enable_thinking": False}
    messages = [
        {"role": "system", "content": "Sys"},
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "R1"},
        {"role": "assistant", "content": "Done"},
    ]
    out = r.render_conversation(Conversation.create("d", messages, [TOOL], {}, []))
    assert out.prompt_text == (
        "<|im_start|>system\nSys\n\n# Tools\n\nYou may call one or more functions to assist with "
        "the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
        "tags:\n<tools>\n"
        '{"type": "function", "function": {"name": "f", "description": "d", "parameters": '
        '{"type": "object", "properties": {}}}}'
        "\n</tools>\n\nFor each function call, return a json object with function name and "
        'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": '
        '<function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nQ<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nR1\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    # Qwen3 keeps ids as they are (no Kimi renaming) and takes the `enable_thinking` switch.
    assert out.notes == []


def test_qwen3_probe(qwen_dir):
    probe = probe_template(Renderer(qwen_dir))
    assert probe["tools_rendered"] and probe["declaration_matches_profile"]
    assert probe["default_system_injected"] is False
    assert probe["generation_suffix"] == "<|im_start|>assistant\n"
    assert probe["prefix_stable"] is False
    assert probe["thinking_switch"] == {"key": "enable_thinking", "changes_prompt": True}
