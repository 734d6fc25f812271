"""Training steps at Kimi-K2.5's real width without the model: target configs of that width,
an EAGLE-3 drafter built by eyas's own method code, random target states, one step.

Shared by the FLOP count (`bench/bench_train_flops.py`, `tests/train/test_flops.py`: on fake
tensors, so the width costs nothing), the memory trace (`eyas.testing.peak_memory`) and the
GPU benchmark (`bench/bench_train_gpu.py`: real tensors on the device).

Two targets of Kimi-K2.5's width (the dims of the 2026-12-04 H200 measurements):
- `kimi`: Kimi-K2.5's own text config (hidden 7168, vocabulary 163,840, MLA attention, 61
  layers); the EAGLE-3 drafter takes MHA (64 heads of 128) or MLA (the target's ranks);
- `llama`: a Llama-shaped verifier of the same width (64 heads of 128, 8 KV heads, MLP 18432),
  which speculators' `Eagle3DraftModel` can also be built from: the peer comparison's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

KIMI_TEXT = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "vocab_size": 163840,
    "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
    "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
    "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "rope_theta": 50000.0,
    "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096,
                     "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "tie_word_embeddings": False, "bos_token_id": 163584, "eos_token_id": 163585,
}  # fmt: skip
KIMI_TINY = {
    "vocab_size": 8192, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
    "num_key_value_heads": 4, "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16, "v_head_dim": 32, "n_routed_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
}  # fmt: skip
LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 7168,
    "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 64,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 163840,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2,
}  # fmt: skip
LLAMA_TINY = {
    "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192, "num_hidden_layers": 8,
}  # fmt: skip
DRAFT_VOCAB = 32000


def _kimi_config(tiny: bool) -> dict:
    return {
        "architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
        "tie_word_embeddings": False, "text_config": {**KIMI_TEXT, **(KIMI_TINY if tiny else {})},
        "vision_config": {"model_type": "moonvit", "hidden_size": 1152, "num_hidden_layers": 27},
        "bos_token_id": 163584, "eos_token_id": 163585,
    }  # fmt: skip


def _llama_config(tiny: bool) -> dict:
    return {**LLAMA, **(LLAMA_TINY if tiny else {})}


CONFIGS = {"kimi": _kimi_config, "llama": _llama_config}


def write_target(path: Path, kind: str, tiny: bool = False, weights: bool = False) -> Path:
    """A target directory of `kind` (kimi | llama): its config.json and, with `weights`, the
    embedding, final norm and head as safetensors (random, bf16; what speculators loads)."""
    path.mkdir(parents=True, exist_ok=True)
    cfg = CONFIGS[kind](tiny)
    text = cfg.get("text_config", cfg)
    (path / "config.json").write_text(json.dumps(cfg))
    if weights:
        from safetensors.torch import save_file

        g = torch.Generator().manual_seed(0)
        v, h = text["vocab_size"], text["hidden_size"]
        tensors = {
            "model.embed_tokens.weight": (torch.randn(v, h, generator=g) * 0.02).bfloat16(),
            "lm_head.weight": (torch.randn(v, h, generator=g) * 0.02).bfloat16(),
            "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        }
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def random_vocab(vocab_size: int, draft_vocab: int = DRAFT_VOCAB) -> dict:
    """A draft vocabulary of `draft_vocab` ids (at most half the target's) chosen by eyas's own
    rule from fixed random counts: the same ids for every side of a comparison."""
    from eyas.drafter.vocab import choose_draft_vocab

    counts = torch.randint(1, 1000, (vocab_size,), generator=torch.Generator().manual_seed(0))
    return choose_draft_vocab(counts, min(draft_vocab, vocab_size // 2))


def train_config(target: Path, **settings: Any):
    """A `TrainConfig` for `target` with every other field at its default (no data needed).
    `settings`: its fields, a method's option by its short name (`draft_head` for
    `eagle3.draft_head`, as `eyas.drafter.options.OLD_KEYS` maps them)."""
    from eyas.drafter.options import OLD_KEYS
    from eyas.train.config import TrainConfig

    cfg = TrainConfig.model_construct(method="eagle3", target=target)
    for name, field in TrainConfig.model_fields.items():
        cfg.__dict__.setdefault(name, field.get_default(call_default_factory=True))
    for name, value in settings.items():
        if name in OLD_KEYS:
            section, key = OLD_KEYS[name].split(".")
            options = getattr(cfg, section)
            cfg.__dict__[section] = options.model_copy(update={key: value})
        else:
            cfg.__dict__[name] = value
    return cfg


@dataclass
class Drafter:
    method: Any
    model: torch.nn.Module
    cfg: Any
    n_aux: int
    hidden: int
    vocab_size: int


def eagle3_drafter(target: Path, vocab: dict, embed: torch.Tensor, head: torch.Tensor, **settings):
    """eyas's EAGLE-3 drafter for `target` as `eyas train` builds it (`build_config`,
    `build_model`, `init_from_target`), on the current device/fake mode; `settings` are
    TrainConfig fields (attention, draft_head, ttt, activation_checkpointing, fast_path)."""
    from eyas.drafter.registry import get_method
    from eyas.hf_models import target_model

    tm = target_model(target)
    cfg = train_config(target, **settings)
    method = get_method(cfg.method)
    aux = method.default_aux_layers(tm.num_layers, cfg)
    dcfg = method.build_config(
        target=tm, train_cfg=cfg, aux_layers=aux, vocab=vocab, max_positions=tm.context_length
    )
    model = method.build_model(dcfg)
    method.init_from_target(model, embedding=embed, head=head, vocab=vocab)
    return Drafter(method, model, cfg, len(aux), tm.hidden_size, tm.vocab_size)


def eagle3_loss(d: Drafter, ids, supervised, aux, final, head, normalizer=None):
    """One micro-batch's loss (forward), as the trainer runs it: (loss, stats)."""
    from eyas.drafter.loss import Teacher
    from eyas.drafter.method import Prepared

    if normalizer is None:  # every position trained: no host read of the counts
        normalizer = [float(ids.shape[1])] * d.cfg.ttt
    prep = Prepared(ids, supervised, torch.zeros(d.cfg.ttt, dtype=torch.float64), {})
    return d.method.loss(
        d.model,
        d.model,
        prep,
        aux=aux,
        teacher=Teacher(final, head),
        normalizer=normalizer,
        train_cfg=d.cfg,
    )


def random_batch(d: Drafter, tokens: int, device, dtype=torch.bfloat16, seed: int = 1):
    """(ids, supervised, aux states, final states) of one random `tokens`-long sequence."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, d.vocab_size, (1, tokens), generator=g).to(device)
    supervised = torch.ones(1, tokens, dtype=torch.long, device=device)
    aux = torch.randn(1, tokens, d.n_aux * d.hidden, generator=g).to(device, dtype)
    final = torch.randn(1, tokens, d.hidden, generator=g).to(device, dtype)
    return ids, supervised, aux, final
