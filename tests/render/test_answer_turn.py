"""Which turn a prompt answers, and templates without tools (ChatML, as SmolLM2 ships)."""

import json

import pytest

from eyas.records import Conversation
from eyas.render import Renderer
from eyas.render.probe import probe_template
from eyas.render.renderer import answer_turn, answer_turns, has_unanswered
from eyas.render.run import render_file

U1 = {"role": "user", "content": "first question"}
A1 = {"role": "assistant", "content": "first answer"}
U2 = {"role": "user", "content": "second question"}
PENDING = {"role": "assistant", "content": None}
TOOL = {
    "type": "function",
    "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}},
}


@pytest.mark.parametrize(
    ("messages", "turn", "turns"),
    [
        ([U1], -1, [1]),
        ([U1, A1], 1, [1]),
        ([U1, A1, U2], -1, [1, 3]),  # the final question is answered, not dropped
        ([U1, A1, U2, A1], 3, [1, 3]),
        ([U1, PENDING, U2], 1, [1, 3]),  # MT-Bench: the second question needs the own answer
        ([{"role": "system", "content": "s"}], -1, []),
    ],
)
def test_answer_turn(messages, turn, turns):
    assert answer_turn(messages) == turn
    assert answer_turns(messages) == turns


def test_a_tool_result_at_the_end_is_answered():
    call = {"id": "functions.lookup:0", "type": "function"}
    call["function"] = {"name": "lookup", "arguments": "{}"}
    msgs = [U1, {"role": "assistant", "content": "", "tool_calls": [call]}]
    msgs.append({"role": "tool", "tool_call_id": call["id"], "content": "42"})
    assert answer_turn(msgs) == -1
    assert not has_unanswered(msgs) and has_unanswered([U1, PENDING, U2])


def test_final_user_turn_is_in_the_prompt(chatml_dir):
    r = Renderer(chatml_dir)
    conv = Conversation.create("d", [U1, A1, U2], [], {}, [])
    prompt = r.render_conversation(conv)
    assert prompt.turn == -1
    assert prompt.prompt_text.endswith("second question<|im_end|>\n<|im_start|>assistant\n")
    assert "first answer" in prompt.prompt_text


def test_pending_turn_is_prompted_first_and_never_rendered(chatml_dir):
    r = Renderer(chatml_dir)
    conv = Conversation.create("d", [U1, PENDING, U2], [], {}, [])
    prompt = r.render_conversation(conv)
    assert prompt.turn == 1
    assert prompt.prompt_text.endswith("first question<|im_end|>\n<|im_start|>assistant\n")
    assert "None" not in prompt.prompt_text and "second question" not in prompt.prompt_text


def test_chatml_template_without_tools_is_probed_as_such(chatml_dir):
    r = Renderer(chatml_dir)
    assert r.model_format.name == "generic"
    assert r.stop_token_ids() == [r.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    probe = probe_template(r)
    assert probe["tools_rendered"] is False and probe["declaration_style"] == "ignored"
    assert probe["default_system_injected"] and probe["prefix_stable"]


def _write(path, convs):
    path.write_text("\n".join(json.dumps(c.to_dict()) for c in convs) + "\n")
    return path


def test_mixed_dataset_renders_its_chat_rows_and_counts_the_tool_rows(tmp_path, chatml_dir):
    chat = [Conversation.create("mix", [{**U1, "content": f"q{i}"}], [], {}, []) for i in range(9)]
    tools = [
        Conversation.create("mix", [{**U1, "content": f"t{i}"}], [TOOL], {}, []) for i in range(11)
    ]
    convs = [c for pair in zip(tools, chat) for c in pair] + tools[len(chat) :]
    result = render_file(
        Renderer(chatml_dir), _write(tmp_path / "c.jsonl", convs), tmp_path / "r.jsonl"
    )
    assert result.num_rendered == 9
    assert result.reasons == {"tools_ignored": 11}
    rendered = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rendered] == [c.id for c in convs if not c.tools]
    errors = [json.loads(x) for x in (tmp_path / "r.errors.jsonl").read_text().splitlines()]
    assert sorted(e["id"] for e in errors) == sorted(c.id for c in tools)
    assert {e["reason"] for e in errors} == {"tools_ignored"}


def test_all_tool_dataset_is_refused_whole(tmp_path, chatml_dir):
    from eyas.render.probe import TemplateProbeError

    tools = [
        Conversation.create("t", [{**U1, "content": f"t{i}"}], [TOOL], {}, []) for i in range(3)
    ]
    with pytest.raises(TemplateProbeError) as exc:
        render_file(Renderer(chatml_dir), _write(tmp_path / "c.jsonl", tools), tmp_path / "r.jsonl")
    assert exc.value.reason == "tools_ignored"
    assert not (tmp_path / "r.jsonl").exists()


def test_with_thinking_switches_only_the_template_kwargs(kimi_dir):
    base = Renderer(kimi_dir)
    on, off = base.with_thinking(True), base.with_thinking(False)
    assert base.with_thinking(None) is base
    assert on.template_kwargs == {"thinking": True} and off.template_kwargs == {"thinking": False}
    assert on.tokenizer is base.tokenizer
    msgs = [U1]
    assert on.render_text(msgs) != off.render_text(msgs)
    assert on.render_text(msgs) == base.render_text(msgs, thinking=True)
