"""The repetition-loop threshold, both ways, on real tokenizers (the toy Kimi tokenizer and
SmolLM2's): loops SmolLM2 really falls into are found wherever max_new_tokens cuts them;
legitimate repetition (a long numbered list, a markdown table, repeated code lines) is not,
complete or cut at any line. Then the audit: loops quarantined with their span shown, the
truncation rate judged on a confidence bound without them, and what training keeps."""

import copy
import json

import pytest
from audit_helpers import write_jsonl
from typer.testing import CliRunner

from eyas.audit import AuditOptions, run_audit
from eyas.audit.report import write_html
from eyas.cli import app
from eyas.render.renderer import load_tokenizer
from eyas.store import load_table, select_trainable
from eyas.store.loops import MIN_LOOP_TOKENS, find_loop

TOKENIZERS = ["kimi", pytest.param("smollm2", marks=pytest.mark.real)]

# SmolLM2-135M-Instruct's greedy outputs at max_new_tokens 320 (tests/real regenerates some)
STILLNESS = (
    "In the quiet of the night, the world is still,\n"
    + "The world is still, the world is still,\nA stillness, a stillness, a stillness.\n\n" * 8
)
SLEEP = (
    "Here's a simple sleep routine.\n\n1. Establish a Consistent Sleep Schedule\n"
    "2. Create a Restful Environment\n3. Limit Screen Time Before Bed\n"
    + "".join(f"{k}. Use White Noise Cancellation Devices\n" for k in range(4, 30))
)
SEA = "The sea is vast and deep,\n" + "Abe a sea of dreams,\n" * 30

COUNTRIES = [
    "France Paris",
    "Japan Tokyo",
    "Kenya Nairobi",
    "Peru Lima",
    "Canada Ottawa",
    "Egypt Cairo",
    "Chile Santiago",
    "Norway Oslo",
    "India New Delhi",
    "Spain Madrid",
    "Ghana Accra",
    "Cuba Havana",
    "Iran Tehran",
    "Italy Rome",
    "Nepal Kathmandu",
    "Poland Warsaw",
    "Qatar Doha",
    "Sweden Stockholm",
    "Turkey Ankara",
    "Vietnam Hanoi",
    "Brazil Brasilia",
    "Mexico Mexico City",
    "Greece Athens",
    "Ireland Dublin",
    "Mongolia Ulaanbaatar",
]
LIST = "Here are the capitals:\n\n" + "".join(
    f"{k}. {c.split(' ', 1)[0]}: {c.split(' ', 1)[1]}\n" for k, c in enumerate(COUNTRIES, 1)
)
TABLE = "| Country | Capital | Rank |\n|---|---|---|\n" + "".join(
    f"| {c.split(' ', 1)[0]} | {c.split(' ', 1)[1]} | {k} |\n" for k, c in enumerate(COUNTRIES, 1)
)
CODE = (
    "```python\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n"
    "    def __init__(self):\n        super().__init__()\n"
    "        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)\n"
    "        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)\n"
    "        self.conv3 = nn.Conv2d(64, 128, 3, padding=1)\n"
    "        self.relu = nn.ReLU()\n        self.relu = nn.ReLU()\n        self.relu = nn.ReLU()\n"
    "        self.pool = nn.MaxPool2d(2)\n\n    def forward(self, x):\n"
    "        x = self.pool(self.relu(self.conv1(x)))\n"
    "        x = self.pool(self.relu(self.conv2(x)))\n"
    "        x = self.pool(self.relu(self.conv3(x)))\n"
    "        print(x.shape)\n        print(x.shape)\n        print(x.shape)\n"
    "        return x.flatten(1)\n\n\ngrid = [\n"
    + "    [0, 0, 0, 0, 0, 0, 0, 0],\n"
    * 6
    + "]\n```\n"
    "The grid starts empty; each layer halves the resolution."
)


@pytest.fixture(params=TOKENIZERS)
def tokenizer(request):
    name = request.param
    return load_tokenizer(request.getfixturevalue("kimi_dir" if name == "kimi" else name))


def encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def line_cuts(tok, text: str) -> list[list[int]]:
    """The output cut after each line (the token ids max_new_tokens would leave), and mid-line."""
    ids = encode(tok, text)
    newline_ends = [k + 1 for k in range(len(ids)) if "\n" in tok.decode(ids[k : k + 1])]
    return [ids[:k] for k in sorted({*newline_ends, *(e - 2 for e in newline_ends)}) if k > 0]


@pytest.mark.parametrize("text", [STILLNESS, SLEEP, SEA], ids=["stillness", "sleep", "sea"])
def test_real_loops_are_found_at_their_tail(tokenizer, text):
    # stripped: a tokenizer merges a string's final "\n\n", which generation never does
    ids = encode(tokenizer, text.rstrip())
    loop = find_loop(ids)
    assert loop is not None and loop.length >= MIN_LOOP_TOKENS
    assert loop.start + loop.length == len(ids)
    # the span decodes to the repeated line (a rotation of it: the run starts mid-copy)
    span = tokenizer.decode(loop.span(ids))
    assert any(w in span for w in ("still", "White Noise", "sea of dreams")), span
    # found wherever max_new_tokens cuts, mid-copy included, once the loop has run long enough
    for cut in range(len(ids) - 3, len(ids)):
        assert find_loop(ids[:cut]) is not None
    # and after the stop token, which is not part of the loop
    assert find_loop([*ids, 2], drop_last=True) is not None


@pytest.mark.parametrize("text", [LIST, TABLE, CODE], ids=["list", "table", "code"])
def test_legitimate_repetition_is_not_a_loop(tokenizer, text):
    ids = encode(tokenizer, text)
    assert len(ids) > 150  # long enough to matter
    assert find_loop(ids) is None
    assert find_loop([*ids, 2], drop_last=True) is None
    cuts = line_cuts(tokenizer, text)
    if text is CODE:  # cut inside the 6-line zero grid: ids cannot tell it from a loop
        grid = encode(tokenizer, CODE.split("grid = [")[0])
        cuts = [c for c in cuts if len(c) <= len(grid)]
    flagged = [tokenizer.decode(c[-40:]) for c in cuts if find_loop(c) is not None]
    assert flagged == []


def test_planted_loops_of_every_period(tokenizer):
    base = encode(tokenizer, LIST)[:60]
    for period in (1, 2, 7, 49, 150, 256):
        span = [(k * 37 + period) % 1000 + 100 for k in range(period)]  # distinct ids
        copies = max(3, -(-MIN_LOOP_TOKENS // period))
        loop = find_loop(base + span * copies)
        assert loop is not None and loop.period == period
        assert loop.length >= copies * period
    for period in (49, 150):  # two and a half copies: not yet a loop
        span = [(k * 37 + period) % 1000 + 100 for k in range(period)]
        assert find_loop(base + span * 2 + span[: period // 2]) is None
    assert find_loop(base + list(range(100, 357)) * 3) is None  # period 257: over the limit


# -- the audit -----------------------------------------------------------------------------------


def _cut(s, output_ids, tag):
    s = copy.deepcopy(s)
    s.id, s.output_ids = f"{s.id}-{tag}", output_ids
    s.finish_reason, s.matched_stop = "length", None
    s.sampling = {**s.sampling, "max_new_tokens": len(output_ids)}
    return s


def _plain(world):
    return [
        s for s in world.clean if not (s.turn >= 0 and s.messages[s.turn].get("reasoning_content"))
    ]


@pytest.fixture(scope="module")
def world(kimi_renderer, toy_conversations, clean_samples):
    from eyas.testing.planted import World

    return World(kimi_renderer, toy_conversations, clean_samples)


def test_loops_are_quarantined_with_their_span_shown(tmp_path, world, kimi_dir):
    r = world.renderer
    plain = _plain(world)
    loops = [_cut(plain[k], r.encode(t)[:200], f"loop{k}") for k, t in enumerate((STILLNESS, SEA))]
    healthy = _cut(plain[2], plain[2].output_ids[:-2], "long")
    data = write_jsonl(tmp_path / "s.jsonl", [*world.clean, *loops, healthy])
    result = run_audit(data, kimi_dir)
    assert {q["id"]: q["reason"] for q in result.quarantine} == {
        s.id: "repetition_loop" for s in loops
    }
    finding = next(f for f in result.findings if f.reason == "repetition_loop")
    assert finding.severity == "error" and set(finding.examples) == {s.id for s in loops}
    details = finding.data["details"]
    assert "stillness" in details[loops[0].id] and "sea of dreams" in details[loops[1].id]
    assert [f.examples for f in result.findings if f.reason == "truncated"] == [[healthy.id]]
    assert result.verdict == "PASS"
    page = write_html(result, tmp_path / "a.html").read_text()
    assert "sea of dreams" in page
    shown = CliRunner().invoke(app, ["show", str(data), loops[1].id, "--model", str(kimi_dir)])
    assert shown.exit_code == 0 and "repetition_loop" in shown.output, shown.output
    assert "sea of dreams" in shown.output
    clean = CliRunner().invoke(app, ["show", str(data), healthy.id, "--model", str(kimi_dir)])
    assert clean.exit_code == 0 and "repetition_loop" not in clean.output


def _truncation(result):
    return [f for f in result.findings if f.reason == "truncation_rate"]


def test_truncation_rate_is_judged_on_a_lower_bound(tmp_path, world, kimi_dir):
    """Two cut outputs of 16 (12.5%, the issue's case) are no systemic error; half of them
    cut is, with advice to raise the cap; loops are quarantined, not counted."""
    plain = copy.deepcopy([s for s in _plain(world) if len(s.output_ids) > 6][:16])
    for s in plain:
        s.dataset = "chat"  # the rate is judged per dataset
    few = [*plain[2:], *(_cut(s, s.output_ids[:-3], "long") for s in plain[:2])]
    result = run_audit(write_jsonl(tmp_path / "few.jsonl", few), kimi_dir)
    assert _truncation(result) == [] and result.verdict == "PASS"
    many = [*plain[8:], *(_cut(s, s.output_ids[:-3], "long") for s in plain[:8])]
    result = run_audit(write_jsonl(tmp_path / "many.jsonl", many), kimi_dir)
    (finding,) = _truncation(result)
    assert finding.severity == "error" and result.verdict == "FAIL"
    assert finding.count == 8 and finding.data["lower_bound"] > 0.05
    assert "raise max_new_tokens" in finding.message
    # the same share, cut by loops: quarantined (the quarantine share gates them), not
    # reported as a cap to raise
    r = world.renderer
    looped = [*plain[8:], *(_cut(s, r.encode(SEA)[:150], "loop") for s in plain[:8])]
    result = run_audit(write_jsonl(tmp_path / "loops.jsonl", looped), kimi_dir)
    assert _truncation(result) == []
    assert len(result.quarantine) == 8
    assert {f.reason for f in result.findings if f.systemic and f.severity == "error"} == {
        "quarantine_share"
    }
    # the same 2 of 16 at a strict limit: the bound is over 0, so it is an error
    strict = run_audit(
        write_jsonl(tmp_path / "few2.jsonl", few), kimi_dir, AuditOptions(truncation_error_rate=0)
    )
    assert _truncation(strict)


def test_training_keeps_healthy_cut_outputs_and_never_loops(tmp_path, world):
    r = world.renderer
    plain = _plain(world)
    loop = _cut(plain[0], r.encode(STILLNESS)[:200], "loop")
    healthy = _cut(plain[1], plain[1].output_ids[:-2], "long")
    clean = plain[2]
    path = write_jsonl(tmp_path / "t.jsonl", [loop, healthy, clean])
    table = load_table(path)
    keep, excluded = select_trainable(table)
    assert [table.ids[i] for i in keep] == [healthy.id, clean.id]
    assert excluded == {"repetition_loop": 1}
    keep, excluded = select_trainable(table, "skip")
    assert [table.ids[i] for i in keep] == [clean.id]
    assert excluded == {"repetition_loop": 1, "finish_length": 1}
    # the CLI: `eyas export samples` applies the same rule, `--truncated skip` the other policy
    out = tmp_path / "x.jsonl"
    res = CliRunner().invoke(
        app, ["export", "samples", str(path), "--format", "specforge", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [healthy.id, clean.id]
    res = CliRunner().invoke(
        app,
        [
            "export",
            "samples",
            str(path),
            "--format",
            "specforge",
            "--out",
            str(out),
            "--truncated",
            "skip",
        ],
    )
    assert res.exit_code == 0, res.output
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [clean.id]
