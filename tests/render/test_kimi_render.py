"""Rendering with the K2.5-style template: golden strings checked by hand against
docs/formats.md (the tool round is the K2.5 template's output, checked by hand)."""

import pytest

from eyas.records import Conversation
from eyas.render import Renderer, TemplateProbeError, probe_template, require_native_tools

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {
                    "type": "string",
                    "description": "The city and state, e.g. San Francisco, CA",
                },
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "Temperature unit",
                },
            },
            "required": ["location"],
        },
    },
}
DECL = (
    "<|im_system|>tool_declare<|im_middle|># Tools\n\n## functions\nnamespace functions {\n"
    "// Get the current weather for a location\ntype get_weather = (_: {\n"
    "  // The city and state, e.g. San Francisco, CA\n  location: string,\n"
    '  // Temperature unit\n  unit?: "celsius" | "fahrenheit"\n}) => any;\n}\n<|im_end|>'
)
TOOL_ROUND = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What's the weather in NYC?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "I need to check the weather.",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"location": "New York, NY"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_abc",
        "name": "get_weather",
        "content": '{"temperature": 72}',
    },
    {"role": "assistant", "content": "It is 72."},
]


def conv(messages, tools=()):
    return Conversation.create("d", messages, list(tools), {}, [])


def test_worked_example_tool_round_thinking_on(kimi_dir):
    r = Renderer(kimi_dir)
    assert r.model_format.name == "kimi-k2.5" and r.supply_tools_ts
    out = r.render_conversation(conv(TOOL_ROUND, [WEATHER]))
    assert out.turn == 4
    assert out.prompt_text == (
        DECL + "<|im_system|>system<|im_middle|>You are a helpful assistant.<|im_end|>"
        "<|im_user|>user<|im_middle|>What's the weather in NYC?<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think>I need to check the weather.</think>"
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"location": "New York, NY"}<|tool_call_end|>'
        "<|tool_calls_section_end|><|im_end|>"
        "<|im_system|>get_weather<|im_middle|>## Return of functions.get_weather:0\n"
        '{"temperature": 72}<|im_end|>'
        "<|im_assistant|>assistant<|im_middle|><think>"
    )
    assert "1 tool-call ids rewritten to functions.NAME:N" in out.notes
    assert out.prompt_ids == r.tokenizer(out.prompt_text, add_special_tokens=False)["input_ids"]
    assert r.tokenizer.decode(out.prompt_ids) == out.prompt_text


def test_thinking_off_and_default_system_and_history_reasoning_dropped(kimi_dir):
    r = Renderer(kimi_dir, thinking=False)
    messages = [
        {"role": "user", "content": "Hi", "name": "alice"},
        {"role": "assistant", "content": "Hello", "reasoning_content": "greet"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "Bye!"},
    ]
    out = r.render_conversation(conv(messages))
    assert out.prompt_text == (
        "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
        "<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Hello<|im_end|>"
        "<|im_user|>user<|im_middle|>Bye<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>"
    )
    assert "dropped name on a user message" in out.notes


def test_no_assistant_turn_renders_whole_and_none_reasoning_is_dropped(kimi_dir):
    r = Renderer(kimi_dir)
    whole = r.render_conversation(conv([{"role": "user", "content": "Q"}]))
    assert whole.turn == -1 and whole.prompt_text.endswith(
        "<|im_user|>user<|im_middle|>Q<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    messages = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": None,
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "x", "content": "r"},
        {"role": "assistant", "content": "A"},
    ]
    text = r.render_conversation(conv(messages)).prompt_text
    assert "None" not in text and "<think></think><|tool_calls_section_begin|>" in text
    # No `name` on the tool message: the label falls back to "tool" (§2.4).
    assert "<|im_system|>tool<|im_middle|>## Return of functions.f:0\nr<|im_end|>" in text


def test_control_tokens_are_single_ids(kimi_dir):
    r = Renderer(kimi_dir)
    for marker in r.model_format.markers:
        assert len(r.encode(marker)) == 1, marker


def test_json_fallback_when_tools_ts_str_is_absent(kimi_dir):
    r = Renderer(kimi_dir)
    r.supply_tools_ts = False  # what a renderer bypassing the K2.5 tokenizer override does
    text = r.render_text([{"role": "user", "content": "x"}], [WEATHER])
    assert (
        '<|im_system|>tool_declare<|im_middle|>[{"function":{"description":"Get the current '
        'weather for a location","name":"get_weather","parameters":'
    ) in text
    probe = probe_template(r)
    assert probe["declaration_style"] == "json" and not probe["declaration_matches_profile"]
    with pytest.raises(TemplateProbeError) as exc:
        require_native_tools(probe, r)
    assert exc.value.reason == "wrong_tool_declaration"


def test_probe_records_what_the_template_does(kimi_dir):
    probe = probe_template(Renderer(kimi_dir))
    assert probe["tools_rendered"] and probe["declaration_style"] == "typescript"
    assert probe["declaration_matches_profile"]
    assert probe["default_system_injected"]
    assert "You are Kimi, an AI assistant created by Moonshot AI." in probe["default_system_text"]
    assert probe["generation_suffix"] == "<|im_assistant|>assistant<|im_middle|><think>"
    assert probe["prefix_stable"] is False  # Kimi drops reasoning from history (§2.11)
    assert probe["thinking_switch"] == {"key": "thinking", "changes_prompt": True}


def test_template_that_ignores_tools_is_refused(broken_dir):
    r = Renderer(broken_dir, profile="kimi-k2.5")
    probe = probe_template(r)
    assert probe["tools_rendered"] is False
    with pytest.raises(TemplateProbeError) as exc:
        require_native_tools(probe, r)
    assert exc.value.reason == "tools_ignored"


def test_cached_piecewise_encoding_equals_the_tokenizer(kimi_dir):
    from eyas.sources import convert_rows
    from eyas.toy.datasets import FAMILIES, family_rows

    r = Renderer(kimi_dir)
    assert r._split is not None  # the toy tokenizer's specials are atomic
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 20, seed=4), fam.format, fam.name):
            if hasattr(conv, "messages"):
                messages, _ = r.prepare(conv)
                text = r.render_text(messages, conv.tools)
                assert r.encode(text) == r.tokenizer(text, add_special_tokens=False)["input_ids"]
