"""The typed generate and prepare results give back the dicts eyas returned and wrote before
they were typed, and the CLI prints its summary from the typed fields.

`data/*.json` were written by the dict-returning code (the toy target, the in-process backend:
a first run and a resumed one that had nothing left; paths and host replaced)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eyas.cli import app
from eyas.generate.prepare import PreparedDataset
from eyas.generate.result import GenerateResult

DATA = Path(__file__).parent / "data"
RECORD = ["stage", "eyas_version", "schema_version", "input", "backend", "render", "sampling"]
RECORD += ["shard", "job_id", "host", "pid", "pid_start", "state", "complete", "started_unix"]
RECORD += ["stopped_reason", "this_run", "ended_unix", "counts", "run"]
THIS_RUN = ["jobs", "jobs_done", "samples_written", "failed", "retries"]
THIS_RUN += ["skipped_done_elsewhere", "output_tokens", "failure_reasons", "retry_reasons"]
THIS_RUN += ["finish_reasons", "seconds", "skipped"]
RUN = ["complete", "jobs", "num_jobs", "samples", "duplicates"]
JOB = ["job_id", "host", "pid", "shard", "state", "stopped_reason", "started_unix"]
JOB += ["ended_unix", "committed"]
PREPARED = ["format", "converted", "convert_reasons", "thinking", "rendered", "render_reasons"]


@pytest.mark.parametrize("name", ["generate_result.json", "generate_resumed.json"])
def test_the_typed_generate_result_gives_back_the_old_dict(name):
    text = (DATA / name).read_text()
    old = json.loads(text)
    result = GenerateResult.from_dict(old)
    assert json.dumps(result.to_dict(), indent=2) + "\n" == text  # keys, order and values
    assert GenerateResult.from_dict(result.to_dict()) == result
    assert list(old) == RECORD and list(old["this_run"]) == THIS_RUN
    assert list(old["run"]) == RUN and all(list(j) == JOB for j in old["run"]["jobs"])
    assert result.this_run.samples_written == old["this_run"]["samples_written"]
    assert result.this_run.skipped == old["this_run"]["skipped"]
    assert result.counts.samples == old["counts"]["samples"]
    assert result.run.jobs[0].state == old["run"]["jobs"][0]["state"]


def test_the_prepare_summary_is_the_manifests_datasets_entry():
    old = json.loads((DATA / "prepare_summary.json").read_text())
    typed = {name: PreparedDataset.from_dict(d) for name, d in old.items()}
    assert {name: d.to_dict() for name, d in typed.items()} == old
    for name, d in old.items():
        assert list(d) == PREPARED
        assert typed[name].rejected == sum(d["convert_reasons"].values())


def test_the_cli_prints_the_typed_generate_result(tmp_path, monkeypatch, kimi_dir):
    import dataclasses

    import eyas.generate.run as run

    old = GenerateResult.from_dict(json.loads((DATA / "generate_result.json").read_text()))
    stats = dataclasses.replace(old.this_run.stats, samples_written=4321, retries=17)
    typed = dataclasses.replace(old, this_run=dataclasses.replace(old.this_run, stats=stats))
    monkeypatch.setattr(run, "run_generate", lambda cfg, renderer, progress: typed)
    (tmp_path / "in").mkdir()
    args = ["generate", "--model", str(kimi_dir), "--input", str(tmp_path / "in")]
    args += ["--out", str(tmp_path / "out"), "--no-progress"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "4321 samples written, 0 failed, 17 retries" in res.output
    assert "run: 1 job(s) [complete 0/1]; the run is complete" in res.output


def test_a_real_run_returns_its_job_record_and_the_run_status(tmp_path, toy_tiny):
    from eyas.generate.prepare import prepare
    from eyas.generate.run import run_generate
    from eyas.quickstart import _config
    from eyas.render.renderer import Renderer
    from eyas.store.job_result import RunStatus
    from eyas.store.runs import job_record_path, run_status
    from eyas.toy.datasets import write_datasets

    cfg = _config(tmp_path, toy_tiny, write_datasets(tmp_path / "src", 1, seed=3), 8)
    renderer = Renderer(toy_tiny)
    summary = prepare(cfg, renderer)
    result = run_generate(cfg, renderer, show_progress=False)
    out = result.to_dict()
    on_disk = json.loads(job_record_path(cfg.generate_out, result.job_id).read_text())
    assert {k: v for k, v in out.items() if k not in ("counts", "run")} == on_disk
    status = run_status(cfg.generate_out, result.counts.samples, result.counts.duplicates)
    assert result.run == RunStatus.from_dict(status)
    assert result.this_run.samples_written == result.counts.samples > 0
    assert result.counts.samples == sum(d.rendered for d in summary.values())
