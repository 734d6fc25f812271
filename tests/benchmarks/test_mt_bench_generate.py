"""MT-Bench through `eyas generate`: the second question is answered after the regenerated
first answer, whatever `multi_turn` says (the source has no first answer to keep)."""

import json
from itertools import islice

import pytest
from typer.testing import CliRunner

from eyas.benchmarks import BENCHMARKS, data_file
from eyas.cli import app
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources import convert_rows, read_rows
from eyas.store import read_samples
from eyas.testing.server import fake_sglang_server


@pytest.mark.parametrize("multi_turn", ["last", "all"])
def test_second_turn_follows_the_regenerated_first_answer(
    tmp_path, kimi_dir, bench_cache, multi_turn
):
    bench = BENCHMARKS["mt_bench"]
    path = data_file(bench.package, bench.member)
    convs = list(convert_rows(islice(read_rows(path), 3), "mt_bench", "mt_bench", str(path)))
    conv_file = tmp_path / "mt.jsonl"
    conv_file.write_text("\n".join(json.dumps(c.to_dict()) for c in convs) + "\n")
    renderer = Renderer(kimi_dir)
    rendered = tmp_path / "r" / "mt_bench.jsonl"
    render_file(renderer, conv_file, rendered)
    with fake_sglang_server() as url:
        args = ["generate", "--model", str(kimi_dir), "--backend", "sglang", "--url", url]
        args += ["--input", str(rendered), "--out", str(tmp_path / "g")]
        args += ["--max-new-tokens", "700", "--multi-turn", multi_turn, "--no-progress"]
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "g" / "errors.jsonl").read_text() == ""
    samples = {s.id: s for s in read_samples(tmp_path / "g")}
    # Kimi's template is not prefix-stable: each answered turn is its own sample
    assert sorted(samples) == sorted(f"{c.id}#{t}" for c in convs for t in (1, 3))
    first_prompts = [json.loads(x)["prompt_ids"] for x in rendered.read_text().splitlines()]
    for c, first_prompt in zip(convs, first_prompts):
        first, second = samples[f"{c.id}#1"], samples[f"{c.id}#3"]
        assert first.prompt_ids == first_prompt
        answer = second.messages[1]
        assert answer["role"] == "assistant" and answer["content"] is not None
        assert second.messages[2] == c.messages[2]  # the source's second question
        text = renderer.tokenizer.decode(second.prompt_ids)
        question = f"<|im_user|>user<|im_middle|>{c.messages[2]['content']}<|im_end|>"
        assert text.endswith(question + "<|im_assistant|>assistant<|im_middle|><think>")
        assert text.count("<|im_assistant|>") == 2  # the regenerated first answer, then ours
