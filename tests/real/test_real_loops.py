"""Cut outputs of a real model (issue 29): SmolLM2-135M-Instruct, greedy, falls into repetition
loops on some prompts (a poem about the sea, a haiku) and writes past a modest cap on others
(code with explanations). Regenerated in process: the loops are quarantined as
`repetition_loop`, the audit PASSes (two loops in 15 samples are within the quarantine
share, one long answer is no systemic truncation), and training keeps the healthy cut output
while never using a loop."""

import json
from pathlib import Path

import pytest
from real_helpers import invoke

from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import load_table
from eyas.train.data import load_sequences

pytestmark = [pytest.mark.real, pytest.mark.slow]

CAP = 160
# SmolLM2 loops on these, greedily, well within CAP (measured: a 7-token verse from output
# token 19; a 35-token couplet from token 28)
LOOPING = (
    "Write a haiku about autumn.",
    "Write a poem about the sea.",
)
LONG = "Write a Python function that adds two numbers."  # 211 tokens, no loop: cut at CAP
SHORT = (
    "What is the capital of France?",
    "What is 2 + 2?",
    "What is the chemical symbol for gold?",
    "How many days are in a week?",
    "What is the largest planet in our solar system?",
    "What is the opposite of hot?",
    "Name a primary color.",
    "What is the boiling point of water in Celsius?",
    "What color is the sky on a clear day?",
    "Translate 'thank you' into French.",
    "What is the freezing point of water in Fahrenheit?",
    "Who painted the Mona Lisa?",
)


@pytest.fixture(scope="module")
def regenerated(smollm2, module_tmp):
    root = module_tmp("loops")
    src = root / "chat.src.jsonl"
    prompts = [*LOOPING, LONG, *SHORT]
    src.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "user", "content": p},
                        {"role": "assistant", "content": "."},
                    ]
                }
            )
            + "\n"
            for p in prompts
        )
    )
    convert_file(src, root / "chat.jsonl", "openai", "chat")
    prep = root / "prepare"
    render_file(Renderer(smollm2), root / "chat.jsonl", prep / "rendered" / "chat.jsonl")
    out = root / "generate"
    res = invoke(
        "generate", "--model", smollm2, "--backend", "local", "--input", prep, "--out", out,
        "--max-new-tokens", CAP, "--temperature", "0", "--no-progress",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    table = load_table(out)
    by_prompt = {}
    for i in range(len(table)):
        user = next(m["content"] for m in table.messages(i) if m["role"] == "user")
        by_prompt[user] = table.ids[i]
    return out, by_prompt, table


def _outputs(table, by_prompt) -> str:
    """What SmolLM2 wrote, for a failure message (greedy outputs can change with its weights)."""
    rows = {sid: i for i, sid in enumerate(table.ids)}
    return "\n".join(
        f"{p!r}: {table.finish_reason[rows[sid]]} {table.output.lengths[rows[sid]]} tokens"
        for p, sid in by_prompt.items()
    )


def test_loops_are_quarantined_and_the_audit_passes(smollm2, regenerated, tmp_path):
    out, by_prompt, table = regenerated
    finish = dict(zip(table.ids, table.finish_reason))
    written = _outputs(table, by_prompt)
    assert [finish[by_prompt[p]] for p in (*LOOPING, LONG)] == ["length"] * 3, written
    assert [finish[by_prompt[p]] for p in SHORT] == ["stop"] * len(SHORT), written
    report = tmp_path / "audit.json"
    html = tmp_path / "audit.html"
    res = invoke("audit", out, "--model", smollm2, "--json", report, "--html", html)
    found = json.loads(report.read_text())
    loops = {by_prompt[p] for p in LOOPING}
    rows = [json.loads(x) for x in Path(found["quarantine_file"]).read_text().splitlines()]
    assert {r["id"]: r["reason"] for r in rows} == dict.fromkeys(loops, "repetition_loop"), written
    assert (found["verdict"], res.exit_code) == ("PASS", 0), found["findings"]
    reasons = {(f["check"], f["reason"]) for f in found["findings"]}
    assert ("truncation", "truncation_rate") not in reasons
    cut = next(f for f in found["findings"] if f["reason"] == "truncated")
    assert cut["examples"] == [by_prompt[LONG]]  # the loops are not counted as truncation
    # the repeated span is in the report
    loop = next(f for f in found["findings"] if f["reason"] == "repetition_loop")
    assert set(loop["data"]["details"]) == loops
    assert "sea of dreams" in html.read_text()


def test_training_uses_the_healthy_cut_output_and_no_loop(regenerated, tmp_path):
    out, by_prompt, _ = regenerated
    quarantine = {by_prompt[p] for p in LOOPING}  # as the audit writes it (test above)
    seqs, report = load_sequences(out, 4096, quarantined=frozenset(quarantine))
    used = {s.id for s in seqs}
    assert by_prompt[LONG] in used and not used & quarantine
    assert report.excluded["repetition_loop"] == len(LOOPING)  # even without the quarantine
    skipped, report = load_sequences(out, 4096, truncated="skip")
    assert by_prompt[LONG] not in {s.id for s in skipped}
    assert report.excluded["finish_length"] == 1
