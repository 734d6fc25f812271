"""Multi-turn `all` regeneration."""

import json

from generate_cli import generate, generate_args

from eyas.render import Renderer
from eyas.store import read_samples
from eyas.testing.server import fake_sglang_server


def test_tool_call_mismatch_stops_the_conversation(tmp_path, kimi_dir, rendered):
    # The fake server's outputs never contain a native tool call, so every Glaive tool turn
    # is a mismatch: the first turn is kept, the source's tool result is not spliced in.
    with fake_sglang_server() as url:
        res = generate(
            generate_args(
                kimi_dir,
                "sglang",
                rendered / "rendered" / "b1_glaive.jsonl",
                "--url",
                url,
                "--out",
                tmp_path / "g",
                "--max-new-tokens",
                700,
                "--multi-turn",
                "all",
            )
        )
    assert res.exit_code == 0, res.output
    rows = [
        json.loads(x) for x in (rendered / "rendered" / "b1_glaive.jsonl").read_text().splitlines()
    ]
    tool_rows = {r["id"] for r in rows if any(m.get("tool_calls") for m in r["messages"])}
    errors = [json.loads(x) for x in (tmp_path / "g" / "errors.jsonl").read_text().splitlines()]
    mismatched = {e["id"] for e in errors if e["reason"] == "tool_call_mismatch"}
    truncated = {e["id"] for e in errors if e["reason"] == "truncated_turn"}
    assert mismatched | truncated == tool_rows
    samples = {s.id: s for s in read_samples(tmp_path / "g")}
    for rid in mismatched:
        s = samples[rid]
        assert s.turn == next(i for i, m in enumerate(s.messages) if m["role"] == "assistant")
        assert all(m["role"] != "tool" for m in s.messages)  # no mismatched result attached


def test_all_turns_regenerated_with_local_model(tmp_path, toy_tiny):
    from eyas.render.run import render_file
    from eyas.sources.run import convert_file
    from eyas.toy.datasets import FAMILIES, family_rows

    fam = next(f for f in FAMILIES if f.name == "b5_ultrachat")
    src = tmp_path / "u.src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 6, seed=8)))
    convert_file(src, tmp_path / "u.jsonl", "ultrachat", "b5_ultrachat")
    renderer = Renderer(toy_tiny)
    render_file(renderer, tmp_path / "u.jsonl", tmp_path / "u.r.jsonl")
    res = generate(
        generate_args(
            toy_tiny,
            "local",
            tmp_path / "u.r.jsonl",
            "--out",
            tmp_path / "g",
            "--max-new-tokens",
            48,
            "--multi-turn",
            "all",
        )
    )
    assert res.exit_code == 0, res.output
    samples = list(read_samples(tmp_path / "g"))
    errors = (tmp_path / "g" / "errors.jsonl").read_text().splitlines()
    stopped = {json.loads(e)["id"] for e in errors}  # e.g. truncated_turn: kept, recorded
    stop = set(renderer.stop_token_ids())
    kinds = set()
    for s in samples:
        turns = [i for i, m in enumerate(s.messages) if m["role"] == "assistant"]
        if s.loss_mask is not None:  # one sequence with every regenerated turn supervised
            kinds.add("masked")
            assert len(s.loss_mask) == len(s.output_ids)
            trained_ends = [i for i, t in enumerate(s.output_ids) if t in stop and s.loss_mask[i]]
            assert len(trained_ends) == len(turns)  # each turn's <|im_end|> is supervised
            assert 0 in s.loss_mask  # the user turns in between (and their <|im_end|>) are not
        elif "#" in s.id:  # per-turn rows, each with its true prompt
            kinds.add("per_turn")
            assert s.turn in turns
            assert s.prompt_ids == renderer.encode(
                renderer.render_text(renderer.prepare_messages(s.messages[: s.turn])[0], None)
            )
        else:  # a single regenerated turn: the conversation stopped there, with a reason
            kinds.add("stopped")
            assert s.id in stopped and s.turn == turns[0]
        assert [m["role"] for m in s.messages][:2] == ["user", "assistant"]
    # without reasoning the K2.5-style history renders each earlier turn as generated
    # (`<think></think>` + content), so turns extend one another: one masked sample each
    assert "masked" in kinds, kinds
