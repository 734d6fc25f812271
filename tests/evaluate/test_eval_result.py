"""The typed eval result writes the `--json` file eyas wrote before it had one.

`data/eval_*.json` are `eyas eval --json` files written by the dict-returning code (the toy
target offline, `--bench humaneval`, the fake SGLang server with a baseline, the fake vLLM
server without one; paths and ports replaced). Each reads into `EvalResult` and writes back
key for key, in the same order; the documented keys are listed here, so a renamed field fails.
"""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eyas.cli import app
from eyas.evaluate.result import EvalResult

DATA = Path(__file__).parent / "data"
FILES = ["eval_plain.json", "eval_bench.json", "eval_sglang.json", "eval_vllm.json"]

FIGURES = ["verify_steps", "acceptance_length", "mean_accepted_drafts"]
TAIL = ["follow_ups", "settings"]
MODELS = ["target", "drafter", "eyas_version"]
OFFLINE = [
    *FIGURES,
    "per_position",
    "histogram",
    "lossless",
    "lossless_mismatches",
    "datasets",
    "seconds",
    "output_tokens",
    "method",
    "aux_layers_hf",
    "aux_layer_rule",
    *TAIL,
]
SERVED = ["datasets", "lossless", "lossless_mismatches", "lossless_check", "throughput"]
SERVED += ["servers", "requests", "source", *TAIL]
SGLANG = [*FIGURES, "sglang_accept_length", "per_position", "histogram", *SERVED, *MODELS]
DOCUMENTED = {
    "eval_plain.json": [*OFFLINE, *MODELS],
    "eval_bench.json": [*OFFLINE, "model_card", "runs", *MODELS],
    "eval_sglang.json": SGLANG,
    "eval_vllm.json": [*FIGURES, "per_position", "histogram", *SERVED, *MODELS],
}
SETTINGS = ["backend", "k", "decoding", "topk", "num_draft_tokens", "temperature"]
SETTINGS += ["batch_size", "max_new_tokens", "prompts", "metric"]


@pytest.mark.parametrize("name", FILES)
def test_the_typed_result_writes_the_json_eyas_wrote_before(name):
    text = (DATA / name).read_text()
    written = json.loads(text)
    result = EvalResult.from_dict(written)
    assert json.dumps(result.to_dict(), indent=2) + "\n" == text  # same keys, order, values
    assert EvalResult.from_dict(result.to_dict()) == result
    assert list(written) == DOCUMENTED[name]
    assert list(written["settings"]) == SETTINGS
    # the typed fields are the file's figures
    assert result.acceptance_length == written["acceptance_length"]
    assert result.settings.k == written["settings"]["k"]
    for ds, d in written["datasets"].items():
        assert result.datasets[ds].prompts == d["prompts"]
        assert result.datasets[ds].per_position == d["per_position"]


def test_backend_parts_are_typed_where_the_backend_has_them():
    offline = EvalResult.from_dict(json.loads((DATA / "eval_plain.json").read_text()))
    assert offline.served is None and offline.throughput is None
    assert offline.offline is not None and offline.offline.method == "eagle3"
    sglang = EvalResult.from_dict(json.loads((DATA / "eval_sglang.json").read_text()))
    assert sglang.offline is None and sglang.served is not None
    check = sglang.served.lossless_check
    assert check.compared_with is not None and check.prompts == len(check.per_prompt)
    assert sglang.throughput is not None and sglang.throughput.speedup is not None
    assert sglang.sglang_accept_length is not None and sglang.histogram is None
    vllm = EvalResult.from_dict(json.loads((DATA / "eval_vllm.json").read_text()))
    assert vllm.served is not None and vllm.served.lossless_check.note  # no baseline: why
    assert vllm.throughput is not None and vllm.throughput.speedup is None
    bench = EvalResult.from_dict(json.loads((DATA / "eval_bench.json").read_text()))
    assert bench.model_card is not None and bench.runs is not None
    assert bench.model_card.configurations == list(bench.runs)


def test_the_cli_prints_and_writes_the_typed_result(tmp_path, monkeypatch):
    import dataclasses

    import eyas.evaluate.run as run

    written = json.loads((DATA / "eval_bench.json").read_text())
    typed = EvalResult.from_dict(written)
    # a figure no run gives, so the table can only show it from the typed field
    typed = dataclasses.replace(typed, acceptance_length=3.1416)
    monkeypatch.setattr(run, "run_eval", lambda cfg, log: typed)
    for p in ("target", "drafter"):
        (tmp_path / p).mkdir()
    (tmp_path / "in.jsonl").write_text("")
    out = tmp_path / "e.json"
    args = ["eval", "--target", tmp_path / "target", "--drafter", tmp_path / "drafter"]
    args += ["--input", tmp_path / "in.jsonl", "--json", out]
    res = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    all_row = next(line for line in res.output.splitlines() if "│ all" in line)
    assert "3.142" in all_row
    assert "model card" in res.output and "AL @ chain K=2" in res.output
    assert json.loads(out.read_text()) == {**written, "acceptance_length": 3.1416}
