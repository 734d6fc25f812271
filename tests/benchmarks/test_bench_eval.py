"""`eyas eval --bench`: benchmark prompts rendered with the target's template, later turns on
the target's own answers, and the model-card table (published and the user's configuration,
thinking on and off)."""

import json

import pytest
from typer.testing import CliRunner

from eyas.cli import app
from eyas.evaluate.prompts import follow_up_prompts
from eyas.render import Renderer

PUBLISHED = "steps 3, topk 1, 4 draft tokens"


def _pending_prompt(renderer):
    messages = [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": None},
        {"role": "user", "content": "And another one?"},
    ]
    ids = renderer.encode(renderer.render_text(messages[:1]))
    return {
        "id": "q",
        "dataset": "d",
        "prompt_ids": ids,
        "messages": messages,
        "tools": [],
        "turn": 1,
    }


def test_second_turn_is_asked_after_the_models_own_answer(chatml_dir):
    r = Renderer(chatml_dir)
    end = r.stop_token_ids()[0]
    p = _pending_prompt(r)
    (follow,), stopped = follow_up_prompts([p], {"q": [*r.encode("Blue."), end]}, r)
    assert stopped == {}
    assert follow["id"] == "q#3" and follow["turn"] == 3 and follow["follows"] == "q"
    text = r.tokenizer.decode(follow["prompt_ids"])
    assert text.endswith(
        "Name a colour.<|im_end|>\n<|im_start|>assistant\nBlue.<|im_end|>\n"
        "<|im_start|>user\nAnd another one?<|im_end|>\n<|im_start|>assistant\n"
    )
    # the last answer turn: nothing follows it
    assert follow_up_prompts([follow], {"q#3": [end]}, r) == ([], {})


def test_each_round_asks_the_next_turn_after_every_own_answer_before_it(chatml_dir):
    r = Renderer(chatml_dir)
    end = r.stop_token_ids()[0]
    p = _pending_prompt(r)
    p["messages"] += [{"role": "assistant", "content": None}, {"role": "user", "content": "Why?"}]
    (second,), _ = follow_up_prompts([p], {"q": [*r.encode("Blue."), end]}, r)
    (third,), _ = follow_up_prompts([second], {"q#3": [*r.encode("Red."), end]}, r)
    assert (third["id"], third["turn"], third["follows"]) == ("q#5", 5, "q#3")
    assert r.tokenizer.decode(third["prompt_ids"]).endswith(
        "assistant\nBlue.<|im_end|>\n<|im_start|>user\nAnd another one?<|im_end|>\n"
        "<|im_start|>assistant\nRed.<|im_end|>\n<|im_start|>user\nWhy?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_conversation_stops_where_its_own_answer_cannot_be_followed(chatml_dir):
    r = Renderer(chatml_dir)
    prompts = [{**_pending_prompt(r), "id": name} for name in ("cut", "failed")]
    out, stopped = follow_up_prompts(prompts, {"cut": r.encode("Blue and")}, r)
    assert out == [] and stopped == {"truncated_turn": 1, "earlier_turn_failed": 1}


@pytest.mark.slow
def test_model_card_through_the_cli(tmp_path, toy_tiny, trained_drafter, bench_cache):
    out = tmp_path / "card.json"
    html = tmp_path / "card.html"
    args = ["eval", "--target", str(toy_tiny), "--drafter", str(trained_drafter)]
    args += ["--bench", "mt_bench,humaneval", "--bench", "bfcl_simple_python", "--limit", "2"]
    args += ["--k", "2", "--max-new-tokens", "16", "--json", str(out), "--html", str(html)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "model card" in result.output and PUBLISHED in result.output
    data = json.loads(out.read_text())
    card = data["model_card"]
    assert card["configurations"] == [PUBLISHED, "chain K=2"]
    assert card["thinking_switch"] == "thinking"  # the toy is Kimi-K2.5-format
    assert [data["runs"][c]["settings"]["k"] for c in card["configurations"]] == [3, 2]
    rows = {(r["benchmark"], r["thinking"]): r for r in card["rows"]}
    benches = ("mt_bench", "humaneval", "bfcl_simple_python")
    assert set(rows) == {(b, t) for b in benches for t in ("on", "off")}
    for row in rows.values():
        for label, k in zip(card["configurations"], (3, 2)):
            assert 1.0 <= row["acceptance_length"][label] <= k + 1, row
    for thinking in ("on", "off"):
        mt = rows[("mt_bench", thinking)]
        # two questions, each asked twice unless the own first answer ended the conversation
        assert mt["rows"] == 2 and mt["prompts"] + sum(mt["follow_ups_stopped"].values()) == 4
        assert rows[("humaneval", thinking)]["prompts"] == 2
        assert rows[("bfcl_simple_python", thinking)]["prompts"] == 2  # TypeScript-declared
    assert data["lossless"] is True and card["lossless"] is True
    # each configuration ran its own rounds; both lossless, so both asked the same later turns
    rounds = [data["runs"][c]["follow_ups"] for c in card["configurations"]]
    assert rounds[0] == rounds[1] and rounds[0]["rounds"][0] == 12 and len(rounds[0]["rounds"]) > 1
    assert card["follow_ups_asked_after"].startswith("the evaluated run's own outputs")
    page = html.read_text()
    assert "Model card" in page and "bfcl_simple_python" in page and PUBLISHED in page
    assert card["metric"].startswith("acceptance_length = tokens per target verify step, bonus")


def test_bfcl_on_a_template_without_tools_is_rejected_by_reason(tmp_path, chatml_dir, bench_cache):
    from eyas.benchmarks import BENCHMARKS, benchmark_prompts

    s = benchmark_prompts(BENCHMARKS["bfcl_simple_python"], Renderer(chatml_dir), limit=5)
    # no row renders, so every row is read, and each is counted with its reason
    assert s.prompts == [] and s.rejected == {"tools_ignored": 400} and s.rows == 400
    chat = benchmark_prompts(BENCHMARKS["mt_bench"], Renderer(chatml_dir), limit=3)
    assert len(chat.prompts) == 3 and chat.rejected == {}
    assert all(p["turn"] == 1 for p in chat.prompts)
