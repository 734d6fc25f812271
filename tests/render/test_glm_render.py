"""GLM-4.5, the family added as one file (`eyas/formats/glm.py`) plus a registry line: eyas's
rendering equals `apply_chat_template` with the real GLM-4.5 template, and the format reads
and writes GLM's tool calls and reasoning."""

from pathlib import Path

import pytest

from eyas.records import Conversation
from eyas.render import Renderer, probe_template
from eyas.toy.datasets import FAMILIES, family_rows

TEMPLATE = (Path(__file__).parent / "assets" / "glm-4.5.jinja").read_text()
SPECIALS = [
    "<|endoftext|>",
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "<tool_response>",
    "</tool_response>",
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "東京", "days": 2}'},
}
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Tokyo?"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Call the tool.",
        "tool_calls": [CALL],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    {"role": "assistant", "content": "21 degrees.", "reasoning_content": "Report it."},
]


@pytest.fixture(scope="module")
def glm_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [str(r) for f in FAMILIES for r in family_rows(f, 20, seed=4)] + ["東京 weather"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        chat_template=TEMPLATE,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    out = tmp_path_factory.mktemp("glm")
    fast.save_pretrained(str(out))
    return out


def test_the_glm_format_is_detected_and_probed(glm_dir):
    r = Renderer(glm_dir)
    assert r.model_format.name == "glm-4.5"
    probe = probe_template(r)
    assert probe["tools_rendered"] and probe["declaration_matches_profile"]
    assert probe["declaration_style"] == "json"
    assert probe["default_system_injected"] is False
    assert probe["thinking_switch"] == {"key": "enable_thinking", "changes_prompt": True}


@pytest.mark.parametrize("thinking", [None, False])
def test_render_equals_apply_chat_template(glm_dir, thinking):
    r = Renderer(glm_dir, thinking=thinking)
    tok = r.tokenizer
    for turn in (1, 3, 5):
        conv = Conversation.create(
            "d", CONVERSATION[: turn + 1] if turn < 5 else CONVERSATION, [WEATHER], {}, []
        )
        messages, _notes = r.prepare(conv)
        # GLM's template iterates `arguments.items()`: the format decodes JSON-string arguments
        assert all(
            isinstance(c["function"]["arguments"], dict)
            for m in messages
            for c in m.get("tool_calls") or []
        )
        for k in range(1, len(messages) + 1):
            history = messages[:k]
            if history[-1]["role"] == "assistant":
                continue
            kwargs = {"enable_thinking": thinking} if thinking is not None else {}
            want = tok.apply_chat_template(
                history, tools=[WEATHER], add_generation_prompt=True, tokenize=False, **kwargs
            )
            assert r.render_text(history, [WEATHER]) == want
            assert r.encode(want) == tok(want, add_special_tokens=False)["input_ids"]


def test_golden_tool_round(glm_dir):
    r = Renderer(glm_dir)
    messages, _ = r.prepare_messages(CONVERSATION[:4])
    text = r.render_text(messages, [WEATHER])
    # checked by hand against the template: the call as GLM's XML-ish arguments (strings raw,
    # numbers as JSON), the result in an observation turn, reasoning kept after the last user
    assert (
        "<|assistant|>\n<think>Call the tool.</think>\n<tool_call>get_weather\n"
        "<arg_key>city</arg_key>\n<arg_value>東京</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
    ) in text
    assert text.endswith(
        '<|observation|>\n<tool_response>\n{"temp": 21}\n</tool_response><|assistant|>'
    )
    assert text.startswith("[gMASK]<sop><|system|>\n# Tools\n\nYou may call one or more functions")


def test_completion_text_and_parsing_round_trip(glm_dir):
    r = Renderer(glm_dir)
    fmt = r.model_format
    messages, _ = r.prepare_messages(CONVERSATION)
    for turn in (2, 4):
        history, reply = messages[:turn], messages[turn]
        completion = fmt.completion_text(reply)
        end = "<|observation|>" if reply.get("tool_calls") else "<|user|>"
        assert completion.endswith(end)
        whole = r.render_text([*history, reply], [WEATHER], add_generation_prompt=False)
        assert r.render_text(history, [WEATHER]) + completion[: -len(end)] == whole
        parsed = fmt.parse_output(r.encode(completion), r.tokenizer)
        assert parsed.ended and parsed.reasoning == reply["reasoning_content"]
        assert parsed.content == (reply["content"] or "")
        if reply.get("tool_calls"):
            (call,) = parsed.calls
            assert call.name == "get_weather" and call.valid_json
            assert call.arguments_json == {"city": "東京", "days": 2}


def test_glm_samples_pass_the_audit(tmp_path, glm_dir):
    import json

    from eyas.audit import AuditOptions, run_audit
    from eyas.sources import convert_rows
    from eyas.toy.samples import reference_sample

    r = Renderer(glm_dir)
    samples = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 3, seed=5), fam.format, fam.name):
            if hasattr(conv, "messages"):
                samples.append(reference_sample(r, conv).to_dict())
    path = tmp_path / "glm.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in samples) + "\n")
    result = run_audit(path, glm_dir, AuditOptions())
    assert result.profile == "glm-4.5"
    assert [(f.check, f.reason, f.dataset) for f in result.findings if f.severity == "error"] == []
