"""Every planted bug class is caught under its check, with the planted sample (and nothing
else) quarantined; clean data and clean controls pass; the gate and the verdicts."""

import copy

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from audit_helpers import write_jsonl

from eyas.audit import CHECKS, AuditOptions, run_audit
from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.store.shards import SCHEMA, _to_columns
from eyas.testing.planted import CONTROLS, PLANTS, World
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample


def audit(tmp_path, samples, model_dir, **opts):
    return run_audit(write_jsonl(tmp_path / "s.jsonl", samples), model_dir, AuditOptions(**opts))


def errors(result):
    return [f for f in result.findings if f.severity == "error"]


def warnings(result):
    return [f for f in result.findings if f.severity == "warning"]


def fired(result, check, reason=None, severity=None):
    return [
        f
        for f in result.findings
        if f.check == check
        and (reason is None or f.reason == reason)
        and (severity is None or f.severity == severity)
    ]


@pytest.fixture(scope="module")
def world(kimi_renderer, toy_conversations, clean_samples):
    return World(kimi_renderer, toy_conversations, clean_samples)


def test_clean_toy_data_passes_with_nothing_quarantined(tmp_path, clean_samples, kimi_dir):
    result = audit(tmp_path, clean_samples, kimi_dir)
    assert errors(result) == [] and warnings(result) == [], [f.to_dict() for f in result.findings]
    assert result.verdict == "PASS" and result.exit_code() == 0 and result.quarantine == []
    assert len(result.to_dict()["datasets"]) == 8


def test_clean_data_also_passes_as_parquet(tmp_path, clean_samples, kimi_dir):
    pq.write_table(pa.table(_to_columns(clean_samples), schema=SCHEMA), tmp_path / "s.parquet")
    result = run_audit(tmp_path / "s.parquet", kimi_dir)
    assert errors(result) == [] and len(result.table) == len(clean_samples)


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_clean_controls_are_not_flagged(tmp_path, world, kimi_dir, control):
    controls = [CONTROLS[control](world, v) for v in range(3)]
    result = audit(tmp_path, [*world.clean, *controls], kimi_dir)
    assert errors(result) == [], [f.to_dict() for f in errors(result)]
    assert result.quarantine == [] and result.verdict == "PASS"


def test_clean_qwen3_rows_pass(tmp_path, qwen_dir):
    renderer = Renderer(qwen_dir)
    samples = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 4, seed=13), fam.format, fam.name):
            if hasattr(conv, "messages"):
                samples.append(reference_sample(renderer, conv))
    result = audit(tmp_path, samples, qwen_dir)
    assert result.profile == "qwen3"
    assert errors(result) == [], [f.to_dict() for f in errors(result)]
    assert result.verdict == "PASS"


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_every_planted_class_is_caught_and_only_it_quarantined(tmp_path, world, kimi_dir, name):
    planted = [PLANTS[name](world, v) for v in range(2)]
    result = audit(tmp_path, [*world.clean, *(p.sample for p in planted)], kimi_dir)
    check, reason = planted[0].check, planted[0].reason
    hits = fired(result, check, reason, planted[0].severity)
    assert hits, f"{check}/{reason} did not fire: {[(f.check, f.reason) for f in errors(result)]}"
    bad_ids = {p.sample.id for p in planted}
    if name == "duplicate_id":  # both copies share the id; the later one is the duplicate
        assert sum(f.count for f in hits) == len(planted)
    else:
        assert set().union(*(set(f.examples) for f in hits)) == bad_ids
    quarantined = {row["id"] for row in result.quarantine}
    clean_ids = {s.id for s in world.clean}
    if name in ("duplicate_id", "duplicate_across_datasets"):
        assert len(quarantined) == len(planted)
    else:
        assert quarantined == bad_ids, quarantined ^ bad_ids
        assert not quarantined & clean_ids


def test_quarantine_rows_and_the_gate(tmp_path, world, kimi_dir):
    planted = [PLANTS["malformed_tool_call"](world, 0), PLANTS["reasoning_lost"](world, 1)]
    samples = [*world.clean, *(p.sample for p in planted)]
    lenient = audit(tmp_path, samples, kimi_dir, max_quarantine=0.5)
    assert lenient.verdict == "PASS"  # a few malformed generations do not fail the run
    rows = {r["id"]: r for r in lenient.quarantine}
    assert set(rows) == {p.sample.id for p in planted}
    for p in planted:
        assert rows[p.sample.id] == {
            "id": p.sample.id,
            "dataset": p.sample.dataset,
            "check": p.check,
            "severity": "error",
            "reason": p.reason,
        }
    strict = audit(tmp_path, samples, kimi_dir, max_quarantine=0.0)
    assert strict.verdict == "FAIL" and strict.exit_code() == 1
    assert {f.check for f in strict.findings if f.reason == "quarantine_share"} == {
        "tool-calls",
        "reasoning",
    }


def test_the_gate_wants_evidence_of_a_share_over_the_limit():
    from eyas.audit.run import share_lower_bound

    # A few bad generations in a small dataset are not a systematic fault...
    assert share_lower_bound(2, 37) < 0.05 < 2 / 37
    # ...the same share over a real regeneration is.
    assert share_lower_bound(5400, 100_000) > 0.05
    assert share_lower_bound(0, 50) == 0.0 and 0 < share_lower_bound(1, 13) < 1 / 13
    # Wilson's bound for 2/37 at 95% (computed by hand): 0.0150.
    assert abs(share_lower_bound(2, 37) - 0.0150) < 5e-4


def test_a_whole_dataset_rendered_naively_fails_on_tool_format(tmp_path, world, kimi_dir):
    naive = [PLANTS["glaive_in_system"](world, v).sample for v in range(6)]
    for s in naive:
        s.dataset = "b1_naive"
    result = audit(tmp_path, [*world.clean, *naive], kimi_dir)
    assert result.verdict == "FAIL"
    systemic = [f for f in result.findings if f.systemic and f.severity == "error"]
    assert [(f.check, f.dataset) for f in systemic] == [("tool-format", "b1_naive")]


def test_systemic_findings_lossy_backend_and_fingerprint(tmp_path, world, kimi_dir):
    lossy = copy.deepcopy(world.clean[:3])
    for s in lossy:
        s.backend = "openai_chat"
    result = audit(tmp_path, [*world.clean[3:], *lossy], kimi_dir)
    hits = fired(result, "lossy-backend", "lossy_backend", "error")
    assert hits and all(f.systemic for f in hits) and result.verdict == "FAIL"
    assert result.quarantine == []  # the run is wrong, not these samples

    stage = tmp_path / "stage"
    stage.mkdir()
    pq.write_table(pa.table(_to_columns(world.clean), schema=SCHEMA), stage / "part-00000.parquet")
    (stage / "manifest.json").write_text(
        '{"render": {"tokenizer_sha256": "0123456789abcdef", "template_sha256": ""}}'
    )
    drift = run_audit(stage, kimi_dir)
    assert fired(drift, "template-drift", "fingerprint_mismatch", "error")
    assert drift.verdict == "FAIL"


def test_truncation_rate_is_systemic_and_cut_samples_warned(tmp_path, world, kimi_dir):
    cut = copy.deepcopy(world.clean[:1])
    cut[0].finish_reason, cut[0].id = "length", cut[0].id + "-trunc"
    cut[0].output_ids = cut[0].output_ids[:-3]
    cut[0].sampling = {**cut[0].sampling, "max_new_tokens": len(cut[0].output_ids)}
    lenient = audit(tmp_path, [*world.clean, *cut], kimi_dir, truncation_error_rate=0.99)
    assert [f.examples for f in fired(lenient, "truncation", "truncated", "warning")] == [
        [cut[0].id]
    ]
    assert lenient.verdict == "PASS"
    strict = audit(tmp_path, [*world.clean, *cut], kimi_dir, truncation_error_rate=0.0)
    assert fired(strict, "truncation", "truncation_rate", "error")


def test_length_distributions_and_anomalies(tmp_path, world, kimi_dir):
    result = audit(tmp_path, world.clean, kimi_dir)
    lengths = {f.dataset: f.data for f in fired(result, "length", "distribution")}
    b1 = [s for s in world.clean if s.dataset == "b1_glaive"]
    assert lengths["b1_glaive"]["output"]["max"] == max(len(s.output_ids) for s in b1)
    assert set(lengths["b1_glaive"]["prompt"]) >= {"median", "p90", "p99", "histogram"}
    capped = copy.deepcopy([s for s in world.clean if s.dataset == "b4_sharegpt"])
    for s in capped:
        s.sampling = {**s.sampling, "max_new_tokens": len(s.output_ids)}
    result = audit(tmp_path, capped, kimi_dir)
    assert fired(result, "length", "many_at_cap", "warning")
    short = copy.deepcopy([s for s in world.clean if s.dataset == "b8_reasoning"])
    for s in short:
        s.output_ids = s.output_ids[-3:]
    result = audit(tmp_path, short, kimi_dir)
    assert fired(result, "length", "much_shorter_than_source", "warning")


def test_repetition_and_context_length(tmp_path, world, kimi_dir):
    rep, long = copy.deepcopy(world.clean[:2])
    rep.output_ids = rep.output_ids[:-1] + [100, 101, 102] * 10 + rep.output_ids[-1:]
    longest = max(len(s.prompt_ids) + len(s.output_ids) for s in world.clean)
    long.output_ids = long.output_ids[:-1] + [100, 200, 300] * longest + long.output_ids[-1:]
    rep.id, long.id = rep.id + "-rep", long.id + "-long"
    result = audit(tmp_path, [*world.clean, rep, long], kimi_dir, max_len=longest + 10)
    # 30 tokens of a 3-token pattern before the stop token: under the 48-token loop threshold
    assert fired(result, "repetition", "repetition_loop", "error")[0].examples == [long.id]
    assert fired(result, "context-length", "over_context_length")[0].examples == [long.id]


# checks whose cases are not plants but have a test of their own in this module
DEDICATED = {"length", "repetition", "context-length", "lossy-backend"}


def test_every_registered_check_is_planted_or_tested(world):
    """A check added without a plant (or a dedicated test) fails here."""
    planted = {PLANTS[name](world, 0).check for name in PLANTS}
    assert set(CHECKS) - planted - DEDICATED == set()
    assert set(CHECKS) >= DEDICATED


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_plant_names_a_registered_check(world, name):
    planted = PLANTS[name](world, 0)
    assert planted.check in CHECKS
    assert planted.reason in CHECKS[planted.check].reasons


def test_without_a_tokenizer_the_audit_is_incomplete(tmp_path, world):
    from typer.testing import CliRunner

    from eyas.cli import app

    path = write_jsonl(tmp_path / "x.jsonl", world.clean)
    result = CliRunner().invoke(app, ["audit", str(path)])
    assert result.exit_code == 3 and "INCOMPLETE" in result.output
    allowed = CliRunner().invoke(app, ["audit", str(path), "--allow-incomplete"])
    assert allowed.exit_code == 0


@pytest.mark.parametrize("model", [False, True])
def test_exit_codes_reports_and_quarantine_file(tmp_path, kimi_dir, world, model):
    import json

    from typer.testing import CliRunner

    from eyas.cli import app

    path = write_jsonl(tmp_path / "x.jsonl", world.clean)
    args = [
        "audit",
        str(path),
        "--json",
        str(tmp_path / "a.json"),
        "--html",
        str(tmp_path / "a.html"),
    ]
    args += ["--model", str(kimi_dir)] if model else ["--allow-incomplete"]
    ok = CliRunner().invoke(app, args)
    assert ok.exit_code == 0, ok.output
    html = (tmp_path / "a.html").read_text()
    assert "<svg" in html and "b1_glaive" in html and "finish reasons" in html
    report = json.loads((tmp_path / "a.json").read_text())
    assert report["quarantine_file"] == str(tmp_path / "x.quarantine.jsonl")
    bad = PLANTS["aborted"](world, 0).sample
    samples = copy.deepcopy(world.clean)
    samples[3].backend = "openai_chat"  # one sample from a lossy backend: a systemic error
    write_jsonl(tmp_path / "x.jsonl", [*samples, bad])
    fail = CliRunner().invoke(app, [*args, "--max-quarantine", "0.5"])
    assert fail.exit_code == 1, fail.output  # the lossy backend is systemic
    assert bad.id in (tmp_path / "a.html").read_text()
    quarantine = (tmp_path / "x.quarantine.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in quarantine] == [bad.id]
