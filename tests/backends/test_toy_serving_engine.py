"""One home per engine: a toy serving engine (the package `tests/backends/toy_engine/`: its
options, its server and the class that starts it, its backend, its acceptance counting) joins
eyas through one registry line, with no other file changed. Then `eyas generate` and served
`eyas eval` run on it through the CLI: its own option and the extra arguments a user passes
(`--engine-arg`) reach the servers eyas starts, its counters are read through the client
policy, the lossless check runs against a baseline eyas starts too, and a server whose log
says it cannot serve is refused at once with its reason."""

import ast
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import toy_engine
from toy_engine.options import ToyOptions
from toy_engine.server import ToyServer, toy_output, toy_verify_steps
from typer.testing import CliRunner

from eyas.backends import registry
from eyas.cli import app
from eyas.hf_models import target_model
from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.store import read_samples
from eyas.toy.datasets import FAMILIES, family_rows

PACKAGE = Path(toy_engine.__file__).parent
SRC = Path(__file__).resolve().parents[2] / "src" / "eyas"
MAX_NEW = 40


@pytest.fixture
def toy(monkeypatch):
    """The one registry line a new engine needs."""
    monkeypatch.setitem(registry.ENGINES, "toy", toy_engine.ENGINE)


@pytest.fixture(scope="module")
def prepared(module_tmp, toy_tiny):
    """A few rendered chat prompts for the toy target, as a prepare stage dir."""
    root = module_tmp("toy-engine")
    fam = next(f for f in FAMILIES if f.name == "b5_ultrachat")
    src = root / "src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 8, seed=3)))
    convert_file(src, root / "conv.jsonl", fam.format, fam.name)
    render_file(Renderer(toy_tiny), root / "conv.jsonl", root / "prep" / "rendered" / "b5.jsonl")
    return root / "prep"


def invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_toy_is_one_package_on_eyas_engine_interfaces_and_eyas_never_names_it():
    used = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eyas"):
                used.add(node.module)
    assert used == {
        "eyas.backends.base",
        "eyas.backends.engine",
        "eyas.backends.policy",
        "eyas.backends.server",
        "eyas.errors",
    }
    assert not [p for p in SRC.rglob("*.py") if "toy_engine" in p.read_text()]
    assert "toy" not in registry.ENGINES  # until its registry line is added


def test_generate_runs_on_the_toy_engine_with_its_own_option(toy, tmp_path, toy_tiny, prepared):
    stop = Renderer(toy_tiny).stop_token_ids()
    # the toy's own option (its servers answer every first attempt 503) reaches its server
    options = ToyOptions(busy_first=True)
    with ToyServer(options, target_model(toy_tiny), log_path=tmp_path / "toy.log") as server:
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
    # each first attempt's 503, retried by the shared client policy
    shards = [pq.read_table(p) for p in sorted((tmp_path / "gen").glob("part-*.parquet"))]
    assert {a for t in shards for a in t.column("attempts").to_pylist()} == {2}
    manifest = json.loads((tmp_path / "gen" / "manifest.json").read_text())
    assert manifest["this_run"]["retry_reasons"] == {"server_error": 8}
    assert manifest["backend"]["servers"] == [{"url": server.url, "engine": "toy"}]
    assert manifest["backend"]["engine"]["kind"] == "toy"
    # an operation the engine does not offer is refused by name
    refused = invoke(
        *("capture", "--target", toy_tiny, "--data", tmp_path / "gen"),
        *("--out", tmp_path / "c", "--backend", "toy", "--url", server.url),
    )
    assert refused.exit_code == 2 and "engine 'toy' cannot capture" in refused.output


def test_served_eval_starts_the_toy_engine_with_the_users_arguments(
    toy, tmp_path, toy_tiny, toy_samples
):
    res = invoke(
        *("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples),
        *("--backend", "toy", "--max-new-tokens", MAX_NEW, "--json", tmp_path / "e.json"),
        "--engine-arg=--step-tokens=2",  # verbatim to both servers eyas starts
    )
    assert res.exit_code == 0, res.output
    assert "starting toy (with the drafter)" in res.output
    assert "starting toy (baseline, no drafter)" in res.output
    assert "(drafter: True)" in (tmp_path / "toy-spec.log").read_text()
    assert "(drafter: False)" in (tmp_path / "toy-base.log").read_text()
    out = json.loads((tmp_path / "e.json").read_text())
    stop = Renderer(toy_tiny).stop_token_ids()
    steps = tokens = 0
    for line in toy_samples.read_text().splitlines():
        ids = toy_output(json.loads(line)["prompt_ids"], stop, MAX_NEW)
        steps, tokens = steps + toy_verify_steps(len(ids), 2), tokens + len(ids)
    assert out["source"] == "toy /counters" and out["settings"]["backend"] == "toy"
    assert out["verify_steps"] == steps  # counted at the user's 2 tokens per step, not 3
    assert out["acceptance_length"] == pytest.approx(tokens / steps, abs=1e-4)
    assert sum(d["verify_steps"] for d in out["datasets"].values()) == steps
    # the baseline eyas started, run twice: the toy is lossless
    assert out["lossless"] is True and out["lossless_check"]["prompts_diverged"] == 0
    assert out["lossless_check"]["prompts"] == len(toy_samples.read_text().splitlines())


def test_a_server_whose_log_says_it_cannot_serve_is_refused_with_its_reason(
    toy, tmp_path, toy_tiny, toy_samples
):
    res = invoke(
        *("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples),
        *("--backend", "toy", "--json", tmp_path / "e.json", "--engine-arg=--oom"),
    )
    assert res.exit_code == 2, res.output
    assert "[server_oom]" in res.output and "toy: out of memory" in res.output
    assert str(tmp_path / "toy-spec.log") in res.output


def test_a_toy_server_without_a_drafter_is_no_speculation_and_other_engines_cannot_eval(
    toy, tmp_path, toy_tiny, toy_samples
):
    common = ("eval", "--target", toy_tiny, "--drafter", tmp_path, "--input", toy_samples)
    with ToyServer(ToyOptions(), target_model(toy_tiny)) as plain:
        res = invoke(*common, "--backend", "toy", "--url", plain.url, "--no-lossless-check")
    assert res.exit_code == 2 and "[no_speculation]" in res.output
    # the registry decides which engines evaluate: one without an acceptance hook cannot
    res = invoke(*common, "--backend", "openai_chat", "--url", "http://127.0.0.1:9")
    assert res.exit_code == 2 and "engine 'openai_chat' cannot evaluate" in res.output
    assert "local" in res.output and "toy" in res.output
