"""The Kimi-K2.5-shaped toy in the real vLLM on CPU: vLLM serves the
`KimiK25ForConditionalGeneration` wrapper as it is (its DeepSeek-V3 text model through
`deepseek_v2.py`, text-only: eyas passes `--language-model-only`), on its CPU MLA backend, and
its hidden-state extraction through eyas's connector gives transformers' states."""

import json

import pytest
import torch
from typer.testing import CliRunner

from eyas.cli import app
from eyas.hf_models import load_frozen_lm
from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def kimi_samples(tmp_path_factory, kimi_toy):
    """Reference-completion samples on the Kimi toy's tokenizer (interchange JSONL)."""
    renderer = Renderer(kimi_toy)
    rows = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 2, seed=41), fam.format, fam.name):
            if hasattr(conv, "messages"):
                rows.append(reference_sample(renderer, conv).to_dict())
    path = tmp_path_factory.mktemp("kimi-samples") / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_vllm_cpu_serves_the_wrapper_and_captures_transformers_states(
    kimi_toy, kimi_samples, vllm_python, tmp_path
):
    from eyas.store.captures import StateReader, read_capture_index

    out = tmp_path / "cap"
    result = CliRunner().invoke(
        app,
        [
            "capture",
            "--target",
            str(kimi_toy),
            "--data",
            str(kimi_samples),
            "--out",
            str(out),
            "--backend",
            "vllm",
            "--vllm-python",
            str(vllm_python),
            "--dtype",
            "float32",
        ],
    )
    log = (out / "vllm-server.log").read_text()
    assert result.exit_code == 0, result.output + log[-3000:]
    # what decided it, from the server's own log (vllm/config/model.py, vllm/platforms/cpu.py)
    assert "Resolved architecture: KimiK25ForConditionalGeneration" in log
    assert "running in text-only mode" in log
    # float32 MLA on CPU: the reference backend, on AMX CPUs too (float32_mla_args)
    assert "Using CPU_MLA backend" in log
    rows, manifest = read_capture_index(out)
    expected = [json.loads(line)["id"] for line in kimi_samples.read_text().splitlines()]
    assert manifest["backend"] == "vllm" and manifest["layers"] == [1, 2, 3, 4]
    assert sorted(r.id for r in rows) == sorted(expected)
    model = load_frozen_lm(kimi_toy, "cpu", torch.float32)
    reader = StateReader()
    for row in rows:
        got = reader.read(row).float()
        with torch.no_grad():
            out_hf = model(input_ids=torch.tensor([row.input_ids]), output_hidden_states=True)
        for j, layer in enumerate([1, 2, 3]):
            torch.testing.assert_close(
                got[:, j], out_hf.hidden_states[layer][0], atol=1e-4, rtol=1e-4
            )
        # the last layer before the final norm: norm and head give transformers' logits
        normed = model.model.norm(got[:, 3])
        torch.testing.assert_close(normed, out_hf.hidden_states[4][0], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(model.lm_head(normed), out_hf.logits[0], atol=1e-4, rtol=1e-4)
