"""The `kimi` toy target: Kimi-K2.5's checkpoint layout at toy size.

Kimi-K2.5 is `KimiK25ForConditionalGeneration` (`model_type: kimi_k25`), a vision-language
wrapper whose text model, a DeepSeek-V3 (`model_type: kimi_k2`), sits under `text_config`:
Multi-head Latent Attention (q_lora_rank, kv_lora_rank, qk_nope/qk_rope/v head dims), MoE
(one shared expert, routed experts picked by sigmoid scores with a correction bias, the first
layer dense) and YaRN rope scaling. Its weights are named `language_model.model.*` and
`language_model.lm_head.*`, one tensor per routed expert (`...mlp.experts.N.gate_proj.weight`),
sharded with a `model.safetensors.index.json`. This toy keeps all of that, with tiny widths.

It is trained with a latent as wide as its hidden size and written with the 512-wide one by an
exact change of basis (`new_text_model`, `widen_latent`).

What it leaves out, on purpose: the vision tower's weights (eyas reads the text model only; the
config still names a `vision_config`, so the toy must be served text-only: vLLM
`--language-model-only`). What is kept at the real size because an engine requires it:
`kv_lora_rank` 512 and `qk_rope_head_dim` 64, the only MLA latent width (576) vLLM's CPU MLA
decode kernel is built for (`vllm/v1/attention/backends/mla/cpu_mla.py`
`CPUMLABackend.get_supported_head_sizes`).

transformers fuses the routed experts on load (`gate_up_proj` [E, 2I, H], `down_proj` [E, H, I],
`conversion_mapping.py` "qwen2_moe", which "deepseek_v3" uses); the checkpoint is written here
with the per-expert names the DeepSeek-V3/Kimi checkpoints use and vLLM's `deepseek_v2.py`
loader expects (`fused_moe_make_expert_params_mapping(ckpt_gate_proj_name="gate_proj", ...)`),
never through `save_pretrained` (whose reverse conversion of transformers' own Kimi-K2.5 class
renames the decoder's `layers` to `blocks`, in 5.24).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch

ARCHITECTURE = "KimiK25ForConditionalGeneration"
TEXT_PREFIX = "language_model."

# The DeepSeek-V3 fields of Kimi-K2.5's text_config beyond a Llama's (the preset gives hidden
# size, dense intermediate size, depth and heads), at toy widths (real values in comments).
TEXT_FIELDS = {
    "moe_intermediate_size": 64,  # 2048
    "n_routed_experts": 8,  # 384
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,  # 8
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.827,
    "q_lora_rank": 64,  # 1536
    "kv_lora_rank": 512,  # 512: vLLM's CPU MLA kernel needs 512 + 64
    "qk_nope_head_dim": 32,  # 128
    "qk_rope_head_dim": 64,  # 64
    "v_head_dim": 32,  # 128
    "num_nextn_predict_layers": 0,
    "hidden_act": "silu",
    "attention_bias": False,
    "rms_norm_eps": 1e-6,
    "initializer_range": 0.02,
    "rope_theta": 50000.0,
    # YaRN x4 over 1024 positions (Kimi-K2.5: x64 over 4096): context 4096
    "max_position_embeddings": 4096,
    "rope_scaling": {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 1024,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
    },
    "tie_word_embeddings": False,
}
# MoonViT's shape as transformers' `Kimi_K25VisionConfig` defaults give it (Kimi-K2.5's own):
# named so the wrapper config is complete; the toy ships none of its weights.
VISION_CONFIG = {
    "model_type": "kimi_k25_vision",
    "patch_size": 14,
    "num_hidden_layers": 27,
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_attention_heads": 16,
    "merge_kernel_size": [2, 2],
}
# Kimi-K2.5's preprocessor_config.json `media_proc_cfg` (vLLM builds the wrapper's image
# processor even when serving it text-only: `kimi_k25.py` `KimiK25ProcessingInfo.__init__`).
MEDIA_PROC_CFG = {
    "in_patch_limit": 16384,
    "patch_size": 14,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "merge_kernel_size": 2,
    "fixed_output_tokens": None,
    "patch_limit_on_one_side": 512,
    "in_patch_limit_each_frame": 4096,
    "in_patch_limit_video": None,
    "sample_fps": 2.0,
    "max_num_frames_each_video": None,
    "temporal_merge_kernel_size": 4,
    "timestamp_mode": "hh:mm:ss.fff",
}


def wrapper_config(preset, tokenizer) -> dict[str, Any]:
    """The toy's `config.json`: Kimi-K2.5's wrapper layout around a DeepSeek-V3 text model;
    `preset` is a `eyas.toy.train.ModelPreset` (MLA: as many key/value heads as heads)."""
    vocab = tokenizer.get_vocab()
    ids = {
        "bos_token_id": vocab["[BOS]"],
        "eos_token_id": [vocab["<|im_end|>"], vocab["[EOS]"]],
        "pad_token_id": vocab["[PAD]"],
    }
    text = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "kimi_k2",
        "vocab_size": len(tokenizer),
        "hidden_size": preset.hidden_size,  # 7168
        "intermediate_size": preset.intermediate_size,  # 18432: the dense first layer
        "num_hidden_layers": preset.num_layers,  # 61
        "num_attention_heads": preset.num_heads,  # 64
        "num_key_value_heads": preset.num_heads,  # 64
        **TEXT_FIELDS,
        **ids,
        "dtype": "float32",
    }
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "kimi_k25",
        **ids,
        "media_placeholder_token_id": vocab["<|media_pad|>"],
        "tie_word_embeddings": False,
        "dtype": "float32",
        "text_config": text,
        "vision_config": dict(VISION_CONFIG),
    }


def write_config(out: Path, preset, tokenizer) -> None:
    config = wrapper_config(preset, tokenizer)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "preprocessor_config.json").write_text(
        json.dumps({"media_proc_cfg": MEDIA_PROC_CFG}, indent=2) + "\n"
    )


def new_text_model(out: Path, seed: int):
    """The model the build trains: the text model of the written `config.json`, read the way
    eyas loads it back (`eyas.hf_models.text_model_config`), with a latent as wide as the
    hidden size. A latent wider than the hidden size (512 over 96 here; never so in the real
    model, 512 under 7168) trains markedly slower per token on this data (loss 3.55 against
    2.35 after 148 steps), yet it lies in a subspace of at most hidden-size dimensions either
    way; `widen_latent` writes the trained model in the served width exactly."""
    from transformers import AutoModelForCausalLM

    from eyas.hf_models import text_model_config

    config = text_model_config(out)
    wide, config.kv_lora_rank = config.kv_lora_rank, config.hidden_size
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for layer in model.model.layers:  # so that the widened norm's epsilon is the configured one
        layer.self_attn.kv_a_layernorm.variance_epsilon *= wide / config.kv_lora_rank
    return model


@torch.no_grad()
def widen_latent(model, out: Path, seed: int):
    """The same function with the `config.json`'s latent width: per layer, the r-wide latent
    is mapped into R dimensions by a random orthonormal Q [R, r] (seeded), so the latent of
    every input is spread over all R coordinates. With a = W_a x, g the latent norm's weight and
    W_b the up-projection: W_a' = Q W_a, g' = 1, W_b' = sqrt(r / R) (W_b diag(g)) Q^T gives
    W_b' RMSNorm_R(Q a) = W_b (g * RMSNorm_r(a)), as RMS_R(Q a) = sqrt(r / R) RMS_r(a) (the
    narrow norm's epsilon is R / r times the wide one's, `new_text_model`)."""
    from transformers import AutoModelForCausalLM

    from eyas.hf_models import text_model_config

    config = text_model_config(out)
    wide = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = dict(model.state_dict())
    r, big = model.config.kv_lora_rank, config.kv_lora_rank
    gen = torch.Generator().manual_seed(seed)
    for i in range(config.num_hidden_layers):
        at = f"model.layers.{i}.self_attn."
        q, _ = torch.linalg.qr(torch.randn(big, r, generator=gen, dtype=torch.float64))
        wa = state[at + "kv_a_proj_with_mqa.weight"].double()  # [r + rope, H]: latent rows first
        wb = state[at + "kv_b_proj.weight"].double()  # [heads * (nope + v), r]
        g = state[at + "kv_a_layernorm.weight"].double()
        state[at + "kv_a_proj_with_mqa.weight"] = torch.cat([q @ wa[:r], wa[r:]]).float()
        state[at + "kv_a_layernorm.weight"] = torch.ones(big)
        state[at + "kv_b_proj.weight"] = ((r / big) ** 0.5 * (wb * g) @ q.T).float()
    wide.load_state_dict(state, strict=True)
    return wide.eval()


@torch.no_grad()
def check_same_function(
    trained, saved, examples: list[tuple[list[int], int]], pad_id: int, tol: float = 1e-3
) -> None:
    """The saved model computes what the measured one does (the quality figures are the trained
    model's): logits on training examples, to float rounding."""
    from eyas.errors import EyasError

    width = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), width), pad_id)
    for row, (seq, _) in enumerate(examples):
        ids[row, : len(seq)] = torch.tensor(seq)
    worst = float((saved(input_ids=ids).logits - trained(input_ids=ids).logits).abs().max())
    if not worst <= tol:
        raise EyasError(
            "toy_build", f"the widened latent changed the toy's logits by {worst:.2e} (> {tol})"
        )


_FUSED = re.compile(r"^(?P<base>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)$")


def checkpoint_tensors(model) -> dict[str, torch.Tensor]:
    """The text model's state dict under Kimi-K2.5's names: `language_model.` first, and one
    gate/up/down tensor per routed expert (transformers' fused [E, ...] parameters split)."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        fused = _FUSED.match(name)
        if fused is None:
            out[TEXT_PREFIX + name] = tensor.contiguous()
            continue
        base = TEXT_PREFIX + fused["base"]
        for e in range(tensor.shape[0]):
            if fused["kind"] == "down_proj":  # [E, H, I]
                out[f"{base}.{e}.down_proj.weight"] = tensor[e].contiguous()
            else:  # [E, 2I, H]: gate rows then up rows, as `MergeModulelist` + `Concatenate(dim=1)`
                gate, up = tensor[e].chunk(2, dim=0)
                out[f"{base}.{e}.gate_proj.weight"] = gate.contiguous()
                out[f"{base}.{e}.up_proj.weight"] = up.contiguous()
    return out


def save_checkpoint(model, out: Path) -> dict[str, str]:
    """Two shards and an index, as Kimi-K2.5 ships (the embedding in the first shard, the final
    norm and the head in the last); returns the weight map."""
    from safetensors.torch import save_file

    tensors = checkpoint_tensors(model)
    half = model.config.num_hidden_layers // 2
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]

    def shard(name: str) -> str:
        layer = re.match(rf"^{re.escape(TEXT_PREFIX)}model\.layers\.(\d+)\.", name)
        first = name.endswith("embed_tokens.weight") or (layer and int(layer[1]) < half)
        return names[0] if first else names[1]

    weight_map = {name: shard(name) for name in sorted(tensors)}
    for file in names:
        part = {n: tensors[n] for n, f in weight_map.items() if f == file}
        save_file(part, str(out / file), metadata={"format": "pt"})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return weight_map
