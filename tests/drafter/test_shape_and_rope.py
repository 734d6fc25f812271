"""The drafter shaped for the target it serves (issue 23 item 4): head_dim 128 where
hidden/heads is no kernel size, the target's YaRN in the drafter's own RoPE, written into both
exports; built from the real Kimi-K2.5 `config.json` layout (no weights)."""

import json
import math

import pytest
import torch

from eyas.drafter.dflash.export import speculators_config as dflash_speculators
from eyas.drafter.dflash.export import zlab_config
from eyas.drafter.eagle3.export import sglang_config, speculators_config
from eyas.drafter.registry import get_method
from eyas.drafter.rope import (
    Rotary,
    engine_magnitudes,
    inv_freq_and_mscale,
    portable_rope_scaling,
    rope_config_fields,
)
from eyas.hf_models import target_model
from test_real_kimi_layout import KIMI_K25_CONFIG
from train_helpers import toy_train_config

YARN = {
    "rope_type": "yarn",
    "factor": 64.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}


@pytest.fixture
def kimi(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(KIMI_K25_CONFIG))
    return target_model(tmp_path)


def _cfg(kimi, **kw):
    return toy_train_config(kimi.dir, kimi.dir / "out", data=kimi.dir, **kw)


@pytest.mark.parametrize("method", ["eagle3", "eagle3.1", "dflash"])
def test_the_kimi_k25_drafter_config(kimi, method):
    """7168 / 64 heads = 112, no kernel's size: 64 heads x 128, the published shape, with the
    published intermediate 12288; the rope is the target's YaRN x64 over 4096."""
    m = get_method(method)
    cfg = _cfg(kimi, method=method)
    vocab = {"draft_vocab_size": 32000, "mask_token_id": 163839}
    d = m.build_config(
        target=kimi,
        train_cfg=cfg,
        aux_layers=m.default_aux_layers(kimi.num_layers, cfg),
        vocab=vocab,
        max_positions=kimi.context_length,
    )
    assert (d.hidden_size, d.num_attention_heads, d.num_key_value_heads) == (7168, 64, 64)
    assert (d.head_dim, d.intermediate_size) == (128, 12288)
    assert d.rope_theta == 50000.0 and d.rope_scaling["rope_type"] == "yarn"
    assert d.rope_scaling["factor"] == 64.0
    assert d.rope_scaling["original_max_position_embeddings"] == 4096
    assert d.max_position_embeddings == 262144
    if method == "dflash":
        assert d.aux_layer_ids == [2, 31, 59] and d.vocab_size == 163840
        layouts = [zlab_config(d, kimi), dflash_speculators(d, kimi, "kimi", 7)]
    else:
        assert d.aux_layer_ids == [2, 30, 58]
        layouts = [speculators_config(d, kimi, "kimi", 3)]
        if method == "eagle3":
            layouts.append(sglang_config(d, kimi))
    for layout in layouts:
        layer = layout.get("transformer_layer_config") or layout
        assert layer["head_dim"] == 128 and layer["num_attention_heads"] == 64
        assert layer["rope_theta"] == 50000.0
        assert layer["rope_scaling"] == portable_rope_scaling(d.rope_scaling)
        assert "rope_parameters" not in layer  # beside rope_theta, transformers 5 drops it
        # Kimi's mscale pair trains at 1.0 (transformers); every engine serves 1.0 too
        assert set(engine_magnitudes(layer["rope_scaling"]).values()) == {1.0}
        assert "mscale" not in layer["rope_scaling"]


def test_explicit_shape_wins_and_kernel_sized_heads_stay(kimi, tmp_path):
    m = get_method("eagle3")
    cfg = _cfg(kimi, head_dim=64, num_attention_heads=32, intermediate_size=8192)
    d = m.build_config(
        target=kimi,
        train_cfg=cfg,
        aux_layers=[2, 30, 58],
        vocab={"draft_vocab_size": 10},
        max_positions=8192,
    )
    assert (d.num_attention_heads, d.head_dim, d.intermediate_size) == (32, 64, 8192)
    toy = dict(
        KIMI_K25_CONFIG["text_config"],
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
    )
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "config.json").write_text(json.dumps(dict(toy, model_type="llama")))
    flat = target_model(tmp_path / "flat")
    d = m.build_config(
        target=flat,
        train_cfg=toy_train_config(flat.dir, tmp_path, data=tmp_path),
        aux_layers=[2, 30, 58],
        vocab={"draft_vocab_size": 10},
        max_positions=8192,
    )
    assert (d.head_dim, d.intermediate_size) == (128, 18432)  # 4096/32 = 128; the target's


def test_yarn_matches_transformers_and_the_engines_maths():
    """eyas's YaRN against transformers' `_compute_yarn_parameters` (the reference HF models
    train with); vLLM and SGLang compute the same (see `eyas.drafter.rope`)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    for scaling in (
        YARN,
        {**YARN, "mscale": 0.707, "mscale_all_dim": 1.0},
        {**YARN, "factor": 4.0},
    ):
        params = {k: v for k, v in scaling.items()}
        hf = LlamaConfig(
            hidden_size=64 * 128,
            num_attention_heads=64,
            head_dim=128,
            max_position_embeddings=262144,
            rope_parameters={**params, "rope_theta": 50000.0},
        )
        inv_hf, attention = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
        inv, mscale = inv_freq_and_mscale(128, 50000.0, scaling)
        assert torch.allclose(inv, inv_hf.float(), rtol=1e-5), scaling
        assert math.isclose(mscale, attention, rel_tol=1e-6), scaling
        # the exported form: the same rotation for transformers, and for every engine rule
        portable = portable_rope_scaling(scaling)
        hf.rope_parameters = {**portable, "rope_theta": 50000.0}
        inv_p, attention_p = ROPE_INIT_FUNCTIONS["yarn"](hf, "cpu")
        assert torch.allclose(inv_p, inv_hf) and math.isclose(attention_p, attention)
        for rule, value in engine_magnitudes(portable).items():
            assert math.isclose(value, mscale, rel_tol=1e-9), (rule, scaling)


def test_the_engines_disagree_on_kimis_rope_keys_as_written():
    """Kimi-K2.5's own `rope_scaling` (mscale 1, mscale_all_dim 1, factor 64): 1.0 for
    transformers and vLLM >= 0.30, 0.1 ln 64 + 1 = 1.416 for vLLM <= 0.28 and SGLang <= 0.5.15
    (vLLM issue #48621): why the export rewrites it."""
    seen = engine_magnitudes(YARN)
    assert seen["transformers"] == seen["vllm>=0.30"] == seen["sglang>=0.5.16"] == 1.0
    assert math.isclose(seen["vllm<=0.28"], 0.1 * math.log(64) + 1)
    assert math.isclose(seen["sglang<=0.5.15"], 1.4158883, rel_tol=1e-6)


def test_plain_rope_is_the_llama_rotation():
    rot = Rotary(16, 10000.0, None)
    x = torch.randn(1, 2, 5, 16)
    pos = torch.arange(5) + 3
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    ang = pos.float()[:, None] * inv
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    want = x * cos + torch.cat([-x[..., 8:], x[..., :8]], -1) * sin
    assert torch.allclose(rot.rotate(x, pos), want, atol=1e-6)
    assert rope_config_fields(10000.0, {"rope_type": "default"}) == {"rope_theta": 10000.0}
    with pytest.raises(Exception, match="drafter implements"):
        Rotary(16, 10000.0, {"rope_type": "longrope", "factor": 2.0})
