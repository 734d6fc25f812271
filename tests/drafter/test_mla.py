"""The MLA drafter (`--attention mla`, `eyas.drafter.mla`): its TTT attention is the plain causal
forward at step 0 and exact at later steps, its dims come from the target, it is the default for
MLA targets, and on the Kimi toy it trains, exports, validates and evaluates losslessly."""

import json
import types

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from typer.testing import CliRunner

from eyas.cli import app
from eyas.drafter.mla import deepseek_scales, kv_bytes_per_token
from eyas.drafter.registry import get_method
from eyas.errors import EyasError
from eyas.hf_models import target_model
from test_real_kimi_layout import KIMI_K25_CONFIG


def _cfg(**kw):
    from eyas.drafter.eagle3.options import Eagle3Options

    base = dict(num_attention_heads=None, head_dim=None, intermediate_size=None, attention=None)
    return types.SimpleNamespace(**{**base, "eagle3": Eagle3Options(), **kw})


def _drafter(target, method="eagle3", seed=0, **kw):
    m = get_method(method)
    t = target_model(target)
    d = m.build_config(
        target=t,
        train_cfg=_cfg(**kw),
        aux_layers=[1, 2, 3],
        vocab={"draft_vocab_size": t.vocab_size},
        max_positions=4096,
    )
    torch.manual_seed(seed)
    return m.build_model(d).eval()


def _reference_attention(q, keys, values, scale):
    """Step k's attention written out: step-0 keys at positions <= j, then step s's key at j."""
    t = q.shape[2]
    k0, v0 = keys[0], values[0]
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    scores = [(q @ k0.transpose(-1, -2)).masked_fill(~causal, float("-inf"))]
    scores += [(q * ks).sum(-1, keepdim=True) for ks in keys[1:]]
    p = torch.softmax(torch.cat(scores, -1) * scale, -1)
    out = p[..., :t] @ v0
    for s, vs in enumerate(values[1:]):
        out = out + p[..., t + s : t + s + 1] * vs
    return out


@pytest.mark.parametrize("method", ["eagle3", "eagle3.1"])
def test_ttt_step_0_is_the_plain_causal_forward_and_later_steps_are_exact(kimi_toy, method):
    model = _drafter(kimi_toy, method)
    assert model.config.attention == "mla"
    att = model.midlayer.self_attn
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (2, 9), generator=gen)
    aux = torch.randn(2, 9, 3 * 96, generator=gen)
    # a ten-fold rope key makes the rope dims matter: a wrong rotation would show
    with torch.no_grad():
        att.kv_a_proj_with_mqa.weight[-att.rope :] *= 10
        per_step = model(ids, aux, 3)
        # step 0 by hand: one causal attention over the projected q, k, v (v narrower than k)
        x, residual = model.midlayer._inputs(model.embed_tokens(ids), model.fuse(aux))
        q, k, v = att.project(x, torch.arange(9))
        assert q.shape[-1] == k.shape[-1] == 96 and v.shape[-1] == 32
        plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=att.scale)
        step0 = model.norm(model.midlayer._finish(residual, att.output(plain)))
        torch.testing.assert_close(per_step[0], step0, rtol=1e-5, atol=1e-5)
        # step 2 against the attention written out with its explicit mask
        cache = []
        hidden = model.fuse(aux)
        for s in range(3):
            ids_s = torch.cat([ids[:, s:], ids[:, -1:].expand(2, s)], 1)
            x, residual = model.midlayer._inputs(model.embed_tokens(ids_s), hidden)
            q, k, v = att.project(x, torch.arange(9) + s)
            cache.append((k, v))
            ref = _reference_attention(q, [c[0] for c in cache], [c[1] for c in cache], att.scale)
            out = model.midlayer._finish(residual, att.output(ref))
            normed = model.norm(out)
            hidden = normed if model.config.norm_output else out
            torch.testing.assert_close(per_step[s], normed, rtol=1e-5, atol=1e-5)


def test_the_deepseek_softmax_scale_and_rope_magnitude(kimi_toy):
    """Kimi's `mscale: 1, mscale_all_dim: 1` at factor 4: rope magnitude 1, softmax scale
    (nope + rope)^-0.5 x (0.1 ln 4 + 1)^2 (vLLM `DeepseekV2MLAAttention`)."""
    model = _drafter(kimi_toy)
    att = model.midlayer.self_attn
    m = 0.1 * torch.log(torch.tensor(4.0)).item() + 1
    assert att.rotary.mscale == pytest.approx(1.0)
    assert att.scale == pytest.approx(96**-0.5 * m * m)
    assert deepseek_scales({"rope_type": "yarn", "factor": 4.0, "mscale": 1.0,
                            "original_max_position_embeddings": 1024}) == pytest.approx((m, 1.0))  # fmt: skip


def test_mla_is_the_default_for_mla_targets_with_the_targets_dims(kimi_toy, toy_tiny):
    model = _drafter(kimi_toy)
    c = model.config
    text = target_model(kimi_toy).text
    assert (c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim, c.qk_rope_head_dim,
            c.v_head_dim) == tuple(text[k] for k in ("q_lora_rank", "kv_lora_rank",
                                    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))  # fmt: skip
    assert _drafter(kimi_toy, attention="mha").config.attention == "mha"
    assert _drafter(toy_tiny).config.attention == "mha"
    with pytest.raises(EyasError, match="needs an MLA target"):
        _drafter(toy_tiny, attention="mla")


def test_draft_kv_bytes_per_token_on_the_real_kimi_shape():
    """One MLA layer caches [kv_lora 512 + rope 64] per token; the Llama drafter 64 heads x 128
    for k and v: 1,152 against 32,768 bytes in bf16 (28x)."""
    text = KIMI_K25_CONFIG["text_config"]
    mla = types.SimpleNamespace(attention="mla", kv_lora_rank=text["kv_lora_rank"],
                                qk_rope_head_dim=text["qk_rope_head_dim"])  # fmt: skip
    mha = types.SimpleNamespace(attention="mha", num_key_value_heads=64, head_dim=128)
    assert kv_bytes_per_token(mla) == 1152 and kv_bytes_per_token(mha) == 32768


# -- the command line on the Kimi toy -------------------------------------------------------


def _cli(*args):
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.output


@pytest.fixture
def kimi_samples(kimi_mla_samples):
    return kimi_mla_samples


@pytest.mark.slow
@pytest.mark.parametrize("method", ["eagle3", "eagle3.1"])
def test_train_attention_mla_exports_validates_and_evaluates(
    tmp_path, kimi_toy, kimi_samples, method
):
    out = tmp_path / "t"
    code, output = _cli(
        "train", "--target", kimi_toy, "--data", kimi_samples, "--out", out, "--method", method,
        "--attention", "mla", "--steps", 8, "--ttt", 3,
        "--batch-tokens", 3000, "--lr", "3e-3", "--set", "warmup_steps=2",
    )  # fmt: skip
    assert code == 0, output
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["loss"] < rows[0]["loss"]
    config = json.loads((out / "drafter" / "drafter_config.json").read_text())
    assert config["attention"] == "mla" and config["kv_lora_rank"] == 512
    code, output = _cli(
        "export", "drafter", "--checkpoint", out, "--format", "vllm", "--out", tmp_path / "vllm"
    )
    assert code == 0 and "validated" in output, output
    exported = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert exported["architectures"] == ["Eagle3DeepseekV3ForCausalLM"]
    assert exported["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert exported["fc_norm"] is exported["norm_output"] is (method == "eagle3.1")
    # DeepSeek's rope keys, never attention_factor (vLLM would read 1.0 as another rope)
    assert exported["rope_scaling"]["mscale_all_dim"] == 1.0
    assert "attention_factor" not in exported["rope_scaling"]
    code, output = _cli("export", "check", tmp_path / "vllm", "--target", kimi_toy,
                        "--engine", "vllm")  # fmt: skip
    assert code == 0, output
    code, output = _cli(
        "export", "drafter", "--checkpoint", out, "--format", "sglang", "--out", tmp_path / "s"
    )
    # EAGLE-3.1: SGLang's MLA class drops fc_norm. EAGLE-3: the 4-layer toy's only three
    # fusable layers start at HF 1, which SGLang's DeepSeek model reads two ways
    # (`to_sglang_layer_ids`; the 61-layer shape exports: `test_sglang_layout_on_the_real_kimi`)
    reason = "export_unsupported" if method == "eagle3.1" else "sglang_layer_ids_ambiguous"
    assert code == 1 and reason in output, output
    code, output = _cli(
        "eval", "--target", kimi_toy, "--drafter", tmp_path / "vllm", "--input", kimi_samples,
        "--k", 3, "--max-new-tokens", 24, "--limit", 2, "--json", tmp_path / "eval.json",
    )  # fmt: skip
    assert code == 0, output
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["lossless"] is True and result["method"] == method
    assert sum(result["histogram"]) == result["verify_steps"] > 0


def test_sglang_layout_on_the_real_kimi(tmp_path, kimi_toy):
    """Kimi-K2.5's real depth and MLA dims (widths cut for CPU): the SGLang layout is
    `Eagle3DeepseekV2ForCausalLM` with ids [1, 29, 57] (HF 2/30/58, read alike by every SGLang
    rule), DeepSeek's rope keys, and validates."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export
    from eyas.train.checkpoint import save_drafter

    target = _real_kimi(tmp_path, kimi_toy)
    m = get_method("eagle3")
    t = target_model(target)
    d = m.build_config(target=t, train_cfg=_cfg(num_attention_heads=2, intermediate_size=64),
                       aux_layers=m.default_aux_layers(t.num_layers),
                       vocab={"draft_vocab_size": 2000, "d2t": None}, max_positions=4096)  # fmt: skip
    model = m.build_model(d)
    with torch.no_grad():
        model.embed_tokens.weight.copy_(torch.zeros_like(model.embed_tokens.weight))
        model.d2t.zero_()
        model.t2d[:2000] = True
    save_drafter(model, tmp_path / "drafter", {"target_dir": str(target)})
    out = export_drafter(tmp_path / "drafter", "sglang", tmp_path / "s", target)
    cfg = json.loads((out / "config.json").read_text())
    # the architecture, config keys and tensor names against SGLang's own class:
    # tests/backends/test_sglang_source.py::test_sglang_mla_draft_class_serves_eyas_mla_export
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"]) == (1536, 512)
    assert cfg["rope_scaling"]["mscale"] == cfg["rope_scaling"]["mscale_all_dim"] == 1.0
    summary = check_export(out, target, engine="sglang")
    assert summary["aux_layers_hf"] == [2, 30, 58] and summary["layout"] == "sglang"


def _real_kimi(tmp_path, kimi_toy):
    """Kimi-K2.5's config with its real depth, MLA dims and rope, hidden 64, vocabulary 2000,
    and zero embedding weights (the validator compares the export's embedding to it)."""
    folder = tmp_path / "kimi-real"
    folder.mkdir()
    config = json.loads(json.dumps(KIMI_K25_CONFIG))
    config["text_config"].update(hidden_size=64, vocab_size=2000, intermediate_size=128)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({"language_model.model.embed_tokens.weight": torch.zeros(2000, 64)},
              str(folder / "model.safetensors"))  # fmt: skip
    return folder


def test_eval_reads_a_torchspec_mla_drafter(tmp_path, kimi_toy, kimi_samples):
    """A config in TorchSpec's `kimi_k25_eagle3_mla.json` layout (SGLang's class, `kimi_k2`
    model type, `eagle_config` ids as layer outputs, full vocabulary, no d2t, no embedding),
    at the toy's dims, with random weights: `eyas eval` reads it as a third-party drafter
    (ids [0, 1, 2] = HF 1/2/3) and stays lossless."""
    text = target_model(kimi_toy).text
    cfg = {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2",
        "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 3, "num_key_value_heads": 3, "q_lora_rank": 64,
        "kv_lora_rank": 512, "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "vocab_size": 1024,
        "draft_vocab_size": 1024, "torch_dtype": "bfloat16", "rope_theta": 50000.0,
        "rope_scaling": text["rope_scaling"],
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1, 2],
                         "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
                         "use_last_layernorm": True, "use_mtp_layernorm": False},
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    }  # fmt: skip
    folder = tmp_path / "torchspec"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    gen = torch.Generator().manual_seed(3)
    shapes = {
        "fc.weight": (96, 288), "norm.weight": (96,), "lm_head.weight": (1024, 96),
        "layers.0.self_attn.q_a_proj.weight": (64, 192),
        "layers.0.self_attn.q_a_layernorm.weight": (64,),
        "layers.0.self_attn.q_b_proj.weight": (3 * 96, 64),
        "layers.0.self_attn.kv_a_proj_with_mqa.weight": (512 + 64, 192),
        "layers.0.self_attn.kv_a_layernorm.weight": (512,),
        "layers.0.self_attn.kv_b_proj.weight": (3 * 64, 512),
        "layers.0.self_attn.o_proj.weight": (96, 96),
        "layers.0.mlp.gate_proj.weight": (128, 96), "layers.0.mlp.up_proj.weight": (128, 96),
        "layers.0.mlp.down_proj.weight": (96, 128),
        "layers.0.input_layernorm.weight": (96,), "layers.0.hidden_norm.weight": (96,),
        "layers.0.post_attention_layernorm.weight": (96,),
    }  # fmt: skip
    weights = {
        k: (torch.ones(s) if "norm" in k else 0.1 * torch.randn(s, generator=gen)).bfloat16()
        for k, s in shapes.items()
    }
    save_file(weights, str(folder / "model.safetensors"))
    code, output = _cli(
        "eval", "--target", kimi_toy, "--drafter", folder, "--input", kimi_samples,
        "--k", 3, "--max-new-tokens", 16, "--limit", 1, "--json", tmp_path / "eval.json",
    )  # fmt: skip
    assert code == 0, output
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["lossless"] is True and result["method"] == "eagle3"
    from eyas.drafter.load import load_drafter

    model = load_drafter(folder, target_dir=kimi_toy)
    assert model.config.attention == "mla" and model.config.aux_layer_ids == [1, 2, 3]
