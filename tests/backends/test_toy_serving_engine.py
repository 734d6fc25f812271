"""One home per engine: a toy serving engine (`eyas.testing.toy_serving_engine`: its server,
backend, acceptance counting and start-up in one module) joins eyas through one registry entry,
and then `eyas generate` and served `eyas eval` run on it through the CLI, with no other file
changed: eyas starts its servers, reads its counters through the client policy and runs the
lossless check against a baseline it starts too."""

import json

import pytest
from typer.testing import CliRunner

from eyas.backends import registry
from eyas.cli import app
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import read_samples
from eyas.testing.server import fake_server
from eyas.testing.toy_serving_engine import toy_output, toy_verify_steps
from eyas.toy.datasets import FAMILIES, family_rows

MODULE = "eyas.testing.toy_serving_engine"
MAX_NEW = 40


@pytest.fixture
def toy_engine(monkeypatch):
    """The one registry line a new engine needs."""
    monkeypatch.setitem(
        registry.ENGINES,
        "toy",
        registry.Engine(
            f"{MODULE}:ToyBackend",
            8,
            acceptance=f"{MODULE}:ToyAcceptance",
            servers=f"{MODULE}:ToyServers",
        ),
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, toy_tiny):
    """A few rendered chat prompts for the toy target, as a prepare stage dir."""
    root = tmp_path_factory.mktemp("toy-engine")
    fam = next(f for f in FAMILIES if f.name == "b5_ultrachat")
    src = root / "src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 8, seed=3)))
    convert_file(src, root / "conv.jsonl", fam.format, fam.name)
    render_file(Renderer(toy_tiny), root / "conv.jsonl", root / "prep" / "rendered" / "b5.jsonl")
    return root / "prep"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_generate_runs_on_a_toy_engine_added_by_one_registry_line(
    toy_engine, tmp_path, toy_tiny, prepared
):
    stop = Renderer(toy_tiny).stop_token_ids()
    with fake_server(MODULE) as server:
        res = invoke(
            *("generate", "--model", toy_tiny, "--backend", "toy", "--url", server.url),
            *("--input", prepared, "--out", tmp_path / "gen", "--no-progress"),
            *("--max-new-tokens", MAX_NEW),
        )
    assert res.exit_code == 0, res.output
    samples = list(read_samples(tmp_path / "gen"))
    assert len(samples) == 8
    for s in samples:
        assert s.backend == "toy"
        assert s.output_ids == toy_output(s.prompt_ids, stop, MAX_NEW)
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())
    assert manifest["backend"]["servers"] == [{"url": server.url, "engine": "toy"}]


def test_served_eval_starts_the_toy_engine_and_reads_its_counters(
    toy_engine, tmp_path, toy_tiny, toy_samples
):
    res = invoke(
        *("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples),
        *("--backend", "toy", "--max-new-tokens", MAX_NEW, "--json", tmp_path / "e.json"),
    )
    assert res.exit_code == 0, res.output
    assert "starting toy (with the drafter)" in res.output
    assert "starting toy (baseline, no drafter)" in res.output
    out = json.loads((tmp_path / "e.json").read_text())
    stop = Renderer(toy_tiny).stop_token_ids()
    steps = tokens = 0
    for line in toy_samples.read_text().splitlines():
        ids = toy_output(json.loads(line)["prompt_ids"], stop, MAX_NEW)
        steps, tokens = steps + toy_verify_steps(len(ids)), tokens + len(ids)
    assert out["source"] == "toy /counters" and out["settings"]["backend"] == "toy"
    assert out["verify_steps"] == steps
    assert out["acceptance_length"] == pytest.approx(tokens / steps, abs=1e-4)
    assert sum(d["verify_steps"] for d in out["datasets"].values()) == steps
    # the baseline eyas started, run twice: the toy is lossless
    assert out["lossless"] is True and out["lossless_check"]["prompts_diverged"] == 0
    assert out["lossless_check"]["prompts"] == len(toy_samples.read_text().splitlines())


def test_a_toy_server_without_a_drafter_is_no_speculation_and_other_engines_cannot_eval(
    toy_engine, tmp_path, toy_tiny, toy_samples
):
    common = ("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples)
    with fake_server(MODULE) as plain:
        res = invoke(*common, "--backend", "toy", "--url", plain.url, "--no-lossless-check")
    assert res.exit_code == 2 and "[no_speculation]" in res.output
    # the registry decides which engines evaluate: one without an acceptance hook cannot
    res = invoke(*common, "--backend", "openai_chat", "--url", "http://127.0.0.1:9")
    assert res.exit_code == 2 and "engine 'openai_chat' cannot evaluate" in res.output
    assert "local" in res.output and "toy" in res.output
