"""`eyas export check` runs the engine's own loader where it can: with `--engine-python` (or in a
python that imports vLLM) vLLM's draft class builds the export and loads its weights, and an
export vLLM refuses fails the check (exit 1, `invalid_export`). Issue 35's defect planted: d2t
and t2d beside a whole-vocabulary head (vLLM: "There is no module or parameter named
'draft_id_to_target_id'"). Without vLLM the check says its loader did not run and applies
eyas's restatement, which catches the same defect (test_eagle3, test_engine_matrix)."""

import json
import shutil

import pytest
import torch
from engine_parity import Shape, build_drafter, export, whole_vocab
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from eyas.backends.vllm.loader import find_python
from eyas.cli import app
from eyas.errors import EyasError
from eyas.export.validate import check_export


@pytest.fixture(scope="module")
def whole_vocab_export(module_tmp, toy_tiny):
    """The toy's EAGLE-3 drafter with its whole draft vocabulary (1024), exported for vLLM."""
    tmp = module_tmp("check")
    shape = Shape("toy_tiny", toy_tiny, train={"draft_vocab": whole_vocab(toy_tiny)})
    model = build_drafter(shape, "eagle3", tmp)
    assert model.config.draft_vocab_size == model.config.vocab_size
    return export(model, shape, "vllm", tmp)


def _plant_issue_35(export, out):
    shutil.copytree(export, out)
    weights = load_file(str(out / "model.safetensors"))
    v = weights["embed_tokens.weight"].shape[0]
    weights.update(d2t=torch.zeros(v, dtype=torch.long), t2d=torch.ones(v, dtype=torch.bool))
    save_file(weights, str(out / "model.safetensors"))
    return out


def test_without_vllm_the_check_says_its_loader_did_not_run(whole_vocab_export, tmp_path):
    assert find_python(None) is None  # eyas's own venv has no vLLM
    summary = check_export(whole_vocab_export)
    loader = summary["engine_loader"]
    assert loader["ran"] is False and "--engine-python" in loader["why"]
    with pytest.raises(EyasError) as err:
        find_python(tmp_path / "no-python")
    assert err.value.reason == "no_vllm"


@pytest.mark.vllm
@pytest.mark.slow
def test_export_check_runs_vllms_loader_and_fails_what_it_refuses(
    whole_vocab_export, tmp_path, vllm_python
):
    check = ["export", "check", "--engine-python", str(vllm_python)]
    good = CliRunner().invoke(app, [*check, str(whole_vocab_export)])
    assert good.exit_code == 0, good.output
    assert "'ran': True" in good.output and "Eagle3LlamaForCausalLM" in good.output
    bad = _plant_issue_35(whole_vocab_export, tmp_path / "planted")
    refused = CliRunner().invoke(app, [*check, str(bad)])
    output = " ".join(refused.output.split())
    assert refused.exit_code == 1, refused.output
    assert "[invalid_export]" in output
    # vLLM's own words, from its loader, besides eyas's restatement of them
    assert (
        "refuses the export: ValueError: There is no module or parameter named "
        "'draft_id_to_target_id' in Eagle3LlamaForCausalLM" in output
    ), output
    assert json.loads((bad / "config.json").read_text())["draft_vocab_size"] == 1024
