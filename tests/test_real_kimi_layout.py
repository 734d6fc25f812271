"""Kimi-K2.5's real `config.json` layout, with its real dimensions and no weights: every stage's
model reader resolves the text model under `text_config`."""

import json

import pytest

from eyas.capture.run import bytes_per_token, capture_layers
from eyas.hf_models import target_model

# The layout of moonshotai/Kimi-K2.5's config.json: a vision-language wrapper whose DeepSeek-V3
# text model (MLA, MoE, YaRN x64 over 4096 positions) sits under text_config.
KIMI_K25_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "auto_map": {
        "AutoConfig": "configuration_kimi_k25.KimiK25Config",
        "AutoModel": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
        "AutoModelForCausalLM": "modeling_kimi_k25.KimiK25ForConditionalGeneration",
    },
    "model_type": "kimi_k25",
    "bos_token_id": 163584,
    "eos_token_id": 163585,
    "pad_token_id": 163839,
    "media_placeholder_token_id": 163605,
    "tie_word_embeddings": False,
    "vision_config": {"model_type": "moonvit", "hidden_size": 1152, "num_hidden_layers": 27},
    "text_config": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "vocab_size": 163840,
        "hidden_size": 7168,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 1,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 64.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "tie_word_embeddings": False,
    },
}
# a slice of its model.safetensors.index.json: the text model is language_model.*
WEIGHT_MAP = {
    "language_model.model.embed_tokens.weight": "model-00001-of-00064.safetensors",
    "language_model.model.norm.weight": "model-00064-of-00064.safetensors",
    "language_model.lm_head.weight": "model-00064-of-00064.safetensors",
    "language_model.model.layers.0.self_attn.kv_a_proj_with_mqa.weight": "model-00001.safetensors",
    "vision_tower.encoder.blocks.0.mlp.fc0.weight": "model-00001-of-00064.safetensors",
}


@pytest.fixture
def kimi_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(KIMI_K25_CONFIG))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": WEIGHT_MAP}))
    return tmp_path


def test_the_accessor_unwraps_text_config(kimi_dir):
    t = target_model(kimi_dir)
    assert t.wrapper and t.model_type == "kimi_k25" and t.text_model_type == "kimi_k2"
    assert (t.num_layers, t.hidden_size, t.vocab_size) == (61, 7168, 163840)
    assert (t.num_attention_heads, t.num_key_value_heads, t.intermediate_size) == (64, 64, 18432)
    assert t.rope_theta == 50000.0
    assert t.rope_scaling["rope_type"] == "yarn" and t.rope_scaling["factor"] == 64.0
    assert t.context_length == 262144  # 4096 x 64, as vLLM derives max_model_len
    assert t.text_prefix == "language_model."
    assert t.tensor_names("embed")[0] == "language_model.model.embed_tokens.weight"
    assert t.tensor_names("norm")[0] == "language_model.model.norm.weight"
    assert t.tensor_names("head") == ("language_model.lm_head.weight",)
    assert t.token_ids()["eos_token_id"] == 163585


def test_capture_reads_layers_and_storage_from_text_config(kimi_dir):
    layers, target = capture_layers(kimi_dir, None)
    assert layers == [2, 30, 58, 61]  # SGLang's default aux layers (HF) + the final layer
    assert bytes_per_token(target.hidden_size, len(layers), __import__("torch").bfloat16) == (
        4 * 7168 * 2 + 5
    )


def test_export_check_resolves_the_target_depth(kimi_dir, tmp_path):
    """`eyas export check` against the real layout reads depth and vocabulary from text_config
    (it computed `None - 1` before)."""
    from eyas.export.validate import check_export

    export = tmp_path / "export"
    export.mkdir()
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": 16,
        "vocab_size": 163840,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 32,
        "draft_vocab_size": 4,
        "target_hidden_size": 7168,
        "max_position_embeddings": 262144,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 60]},
    }
    (export / "config.json").write_text(json.dumps(cfg))
    from safetensors.torch import save_file

    save_file({"norm.weight": __import__("torch").ones(16)}, str(export / "model.safetensors"))
    from eyas.export.validate import ExportError

    with pytest.raises(ExportError) as err:
        check_export(export, kimi_dir)
    problems = "\n".join(err.value.problems)
    # SGLang id 60 is HF 61: past the last layer of a 61-layer target
    assert "aux layers (HF index) [2, 30, 61] outside 1..60 (target depth 61)" in problems
    assert "vocab_size" not in problems and "target_hidden_size" not in problems
