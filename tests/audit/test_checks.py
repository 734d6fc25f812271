"""Every audit check fires, by name and with the right example ids, on a planted bug, and
stays quiet on clean data."""

import copy

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from audit_helpers import glaive_tool_convs, make_sample, write_jsonl
from eyas.audit.checks import CHECKS

from eyas.audit import AuditOptions, run_audit
from eyas.store import SCHEMA, _to_columns
from eyas.toy.naive import naive_glaive_messages


def audit(tmp_path, samples, model_dir, **opts):
    return run_audit(write_jsonl(tmp_path / "s.jsonl", samples), model_dir, AuditOptions(**opts))


def errors_and_warnings(result):
    return [f for f in result.findings if f.severity in ("error", "warning")]


def fired(result, check, severity=None):
    return [
        f
        for f in result.findings
        if f.check == check and (severity is None or f.severity == severity)
    ]


def test_clean_toy_data_has_no_errors_or_warnings(tmp_path, clean_samples, kimi_dir):
    result = audit(tmp_path, clean_samples, kimi_dir)
    assert errors_and_warnings(result) == []
    assert result.num_errors == 0
    assert {f.check for f in result.findings} >= {"length"}
    assert len(result.to_dict()["datasets"]) == 8


def test_clean_data_also_passes_as_parquet(tmp_path, clean_samples, kimi_dir):
    pq.write_table(pa.table(_to_columns(clean_samples), schema=SCHEMA), tmp_path / "s.parquet")
    result = run_audit(tmp_path / "s.parquet", kimi_dir)
    assert errors_and_warnings(result) == [] and len(result.table) == len(clean_samples)


def plant(tmp_path, kimi_dir, kimi_renderer, clean, bad, **opts):
    """Audit clean samples plus `bad` ones; return the result and the bad ids."""
    result = audit(tmp_path, clean + bad, kimi_dir, **opts)
    return result, {s.id for s in bad}


def assert_fires(result, check, bad_ids, severity="error"):
    hits = fired(result, check, severity)
    assert hits, f"{check} did not fire: {[f.to_dict() for f in result.findings]}"
    assert set().union(*(set(f.examples) for f in hits)) <= bad_ids
    assert sum(f.count for f in hits) >= len(bad_ids)


def test_tool_format_naive_glaive_rendering(
    tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations
):
    bad = []
    for c in glaive_tool_convs(toy_conversations)[:3]:
        s = make_sample(
            kimi_renderer, c, messages=naive_glaive_messages(c.messages, c.tools), tools=[]
        )
        s.id += "-naive"
        bad.append(s)
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "tool-format", ids)


def test_tool_format_json_tool_declare(
    tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations
):
    kimi_renderer.supply_tools_ts = False  # render like a gateway that bypasses tools_ts_str
    try:
        bad = [make_sample(kimi_renderer, c) for c in glaive_tool_convs(toy_conversations)[:2]]
    finally:
        kimi_renderer.supply_tools_ts = True
    for s in bad:
        s.id += "-json"
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    hits = [f for f in fired(result, "tool-format", "error") if "TypeScript" in f.message]
    assert hits and set(hits[0].examples) == ids


def test_tools_ignored(tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations):
    bad = []
    for c in glaive_tool_convs(toy_conversations)[:2]:
        s = make_sample(kimi_renderer, c, tools=[])  # prompt rendered without tools=
        s.tools, s.id = c.tools, s.id + "-ignored"
        bad.append(s)
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "tools-ignored", ids)


def test_system_prompt_missing(tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations):
    convs = [c for c in toy_conversations if c.messages[0]["role"] == "system"][:2]
    bad = []
    for c in convs:
        s = make_sample(kimi_renderer, c, messages=c.messages[1:])
        s.messages, s.id = c.messages, s.id + "-nosys"
        s.turn += 1
        bad.append(s)
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "system-prompt", ids)
    assert fired(result, "system-prompt", "warning")  # default injected over a source prompt


def test_special_tokens_split_marker(tmp_path, kimi_dir, kimi_renderer, clean_samples):
    bad = copy.deepcopy(clean_samples[:2])
    split = kimi_renderer.tokenizer(
        "<|im_end|>", add_special_tokens=False, split_special_tokens=True
    )["input_ids"]
    assert len(split) > 1
    for s in bad:
        s.output_ids = s.output_ids[:-1] + split
        s.id += "-split"
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "special-tokens", ids)


def test_truncation_warning_and_error(tmp_path, kimi_dir, kimi_renderer, clean_samples):
    bad = copy.deepcopy(clean_samples[:1])
    bad[0].finish_reason, bad[0].id = "length", bad[0].id + "-trunc"
    result, ids = plant(
        tmp_path, kimi_dir, kimi_renderer, clean_samples, bad, truncation_error_rate=0.99
    )
    assert_fires(result, "truncation", ids, "warning")
    result, ids = plant(
        tmp_path, kimi_dir, kimi_renderer, clean_samples, bad, truncation_error_rate=0.0
    )
    assert_fires(result, "truncation", ids, "error")


def test_length_reports_numbers(tmp_path, kimi_dir, clean_samples):
    result = audit(tmp_path, clean_samples, kimi_dir)
    lengths = {f.dataset: f.data for f in fired(result, "length")}
    b1 = [s for s in clean_samples if s.dataset == "b1_glaive"]
    assert lengths["b1_glaive"]["output"]["max"] == max(len(s.output_ids) for s in b1)
    assert set(lengths["b1_glaive"]["prompt"]) >= {
        "median",
        "p90",
        "p99",
        "max",
        "share_under_500",
        "histogram",
    }


def test_reasoning_scaffold_none_and_dropped(
    tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations
):
    vocab = kimi_renderer.tokenizer.get_vocab()
    scaffold = copy.deepcopy(clean_samples[:1])
    scaffold[0].output_ids = [vocab["<think>"], vocab["</think>"], *scaffold[0].output_ids]
    scaffold[0].id += "-scaffold"
    math = next(c for c in toy_conversations if c.dataset == "b6_math")
    none = make_sample(kimi_renderer, math)
    prompt_text = kimi_renderer.tokenizer.decode(none.prompt_ids)
    none.prompt_ids = kimi_renderer.encode(prompt_text + "None</think>")
    none.output_ids = none.output_ids[none.output_ids.index(vocab["</think>"]) + 1 :]
    none.id += "-none"
    result, _ = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, [*scaffold, none])
    errs = fired(result, "reasoning", "error")
    assert any(scaffold[0].id in f.examples and "scaffold" in f.message for f in errs)
    assert any(none.id in f.examples and "None" in f.message for f in errs)


def test_tool_calls_undeclared_and_bad_json(
    tmp_path, kimi_dir, kimi_renderer, clean_samples, toy_conversations
):
    bad = []
    for k, c in enumerate(glaive_tool_convs(toy_conversations)[:2]):
        msgs = copy.deepcopy(c.messages)
        call = next(m for m in msgs if m.get("tool_calls"))["tool_calls"][0]
        if k == 0:
            call["function"]["name"] = "launch_rocket"
            call["id"] = "functions.launch_rocket:0"
        else:
            call["function"]["arguments"] = '{"location": '
        # the sample's turn is the call turn: cut the conversation after it
        turn = next(i for i, m in enumerate(msgs) if m.get("tool_calls"))
        s = make_sample(kimi_renderer, c, messages=msgs[: turn + 1])
        s.id += f"-call{k}"
        bad.append(s)
    result, _ = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    msgs = {f.message.split(" (")[0]: f.examples for f in fired(result, "tool-calls", "error")}
    assert bad[0].id in msgs["calls to a function the prompt does not declare"]
    assert bad[1].id in msgs["tool-call arguments that are not a JSON object"]


def test_template_drift(tmp_path, kimi_dir, kimi_renderer, clean_samples):
    bad = copy.deepcopy(clean_samples[:2])
    for s in bad:
        s.prompt_ids = s.prompt_ids[:-1] + kimi_renderer.encode("<think></think>")  # thinking off
        s.id += "-drift"
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "template-drift", ids)


def test_roundtrip(tmp_path, kimi_dir, kimi_renderer, clean_samples):
    bad = copy.deepcopy(clean_samples[:1])
    text = kimi_renderer.tokenizer.decode(bad[0].output_ids[:-1])
    bad[0].output_ids = [t for ch in text for t in kimi_renderer.encode(ch)] + bad[0].output_ids[
        -1:
    ]
    bad[0].id += "-rt"
    result, ids = plant(tmp_path, kimi_dir, kimi_renderer, clean_samples, bad)
    assert_fires(result, "roundtrip", ids, "warning")


def test_duplicates(tmp_path, kimi_dir, kimi_renderer, clean_samples):
    same_id = copy.deepcopy(clean_samples[0])
    same_content = copy.deepcopy(clean_samples[1])
    same_content.id += "-copy"
    result = audit(tmp_path, [*clean_samples, same_id, same_content], kimi_dir)
    assert clean_samples[0].id in fired(result, "duplicates", "error")[0].examples
    assert fired(result, "duplicates", "warning")[0].examples == [same_content.id]


def test_repetition_empty_aborted_context_and_lossy(
    tmp_path, kimi_dir, kimi_renderer, clean_samples
):
    rep, empty, abort, lossy = copy.deepcopy(clean_samples[:4])
    rep.output_ids = rep.output_ids[:-1] + [100, 101, 102] * 10 + rep.output_ids[-1:]
    empty.output_ids = empty.output_ids[-1:]
    abort.finish_reason = "abort"
    lossy.backend = "openai_chat"
    for s, tag in ((rep, "rep"), (empty, "empty"), (abort, "abort"), (lossy, "lossy")):
        s.id += f"-{tag}"
    longest = max(len(s.prompt_ids) + len(s.output_ids) for s in clean_samples)
    long = copy.deepcopy(clean_samples[5])
    long.output_ids = long.output_ids[:-1] + [100, 200] * longest + long.output_ids[-1:]
    long.id += "-long"
    result = audit(
        tmp_path, [*clean_samples, rep, empty, abort, lossy, long], kimi_dir, max_len=longest + 10
    )
    assert_fires(result, "repetition", {rep.id, long.id}, "warning")
    assert fired(result, "empty-output", "error")[0].examples == [empty.id]
    assert fired(result, "aborted", "error")[0].examples == [abort.id]
    assert fired(result, "lossy-backend", "error")[0].examples == [lossy.id]
    assert fired(result, "context-length", "error")[0].examples == [long.id]


def test_every_check_is_exercised():
    names = {
        "tool-format",
        "tools-ignored",
        "system-prompt",
        "special-tokens",
        "truncation",
        "length",
        "reasoning",
        "tool-calls",
        "template-drift",
        "roundtrip",
        "duplicates",
        "repetition",
        "empty-output",
        "aborted",
        "context-length",
        "lossy-backend",
    }
    assert set(CHECKS) == names


@pytest.mark.parametrize("model", [False, True])
def test_exit_code_and_reports(tmp_path, kimi_dir, clean_samples, model):
    from typer.testing import CliRunner

    from eyas.cli import app

    bad = copy.deepcopy(clean_samples[:1])
    bad[0].finish_reason = "abort"
    path = write_jsonl(tmp_path / "x.jsonl", clean_samples)
    args = [
        "audit",
        str(path),
        "--json",
        str(tmp_path / "a.json"),
        "--html",
        str(tmp_path / "a.html"),
    ]
    if model:
        args += ["--model", str(kimi_dir)]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    html = (tmp_path / "a.html").read_text()
    assert "<svg" in html and "b1_glaive" in html and "finish reasons" in html
    write_jsonl(tmp_path / "x.jsonl", clean_samples + bad)
    fail = CliRunner().invoke(app, args)
    assert fail.exit_code == 1
    assert bad[0].id in (tmp_path / "a.html").read_text()
