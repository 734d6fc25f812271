"""One registry of engines: adding an engine is one module plus its registry line, and the
new engine gets the shared client policy (retries, reasons, manifest) with no other change."""

import json

import pyarrow.parquet as pq
import pytest
from toy_engine import toy_output
from typer.testing import CliRunner

from eyas.backends import registry
from eyas.cli import app
from eyas.render import Renderer
from eyas.store import read_samples


def generate(model, backend, inp, out):
    args = ["--model", str(model), "--backend", backend, "--input", str(inp), "--out", str(out)]
    return CliRunner().invoke(app, ["generate", *args, "--no-progress"])


@pytest.mark.slow
def test_a_toy_engine_is_one_module_plus_its_registry_line(
    monkeypatch, tmp_path, kimi_dir, rendered_prompts
):
    monkeypatch.setitem(registry.ENGINES, "toy", registry.Engine("toy_engine:ToyBackend", 4))
    out = tmp_path / "gen"
    res = generate(kimi_dir, "toy", rendered_prompts, out)
    assert res.exit_code == 0, res.output
    stop = Renderer(kimi_dir).stop_token_ids()
    samples = list(read_samples(out))
    assert samples
    for s in samples:
        assert s.backend == "toy" and s.output_ids == toy_output(s.prompt_ids, stop)
    shards = [pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))]
    # the toy's 503 on each first attempt, retried by the shared policy
    assert {a for t in shards for a in t.column("attempts").to_pylist()} == {2}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"]["kind"] == "toy"
    assert manifest["this_run"]["retry_reasons"] == {"server_error": len(samples)}
    assert manifest["backend"]["servers"] == [{"url": "toy:", "engine": "toy"}]
    # an operation the engine does not offer is refused by name
    refused = CliRunner().invoke(
        app,
        [
            "capture",
            "--target",
            str(kimi_dir),
            "--data",
            str(out),
            "--out",
            str(tmp_path / "c"),
            "--backend",
            "toy",
        ],
    )
    assert refused.exit_code == 2 and "engine 'toy' cannot capture" in refused.output


def test_unknown_engines_are_a_config_error(kimi_dir, tmp_path):
    res = generate(kimi_dir, "tgi", tmp_path, tmp_path / "g")
    assert res.exit_code == 2 and "'tgi'" in res.output
    assert all(name in res.output for name in ("sglang", "vllm", "local")), res.output
    assert len([line for line in res.output.splitlines() if line.startswith("error:")]) == 1
