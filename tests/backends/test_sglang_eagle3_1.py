"""SGLang's own EAGLE-3 draft model (`srt/models/llama_eagle3.py` of the 0.5.12.post1 and 0.5.23
wheels; `sglang_source`) built from eyas's SGLang export, loaded by its own `load_weights` and
run by its own `forward`s: it computes what eyas trained, for EAGLE-3 and EAGLE-3.1.

What runs is SGLang's: `LlamaModel.__init__` (which reads `fc_norm`, `norm_output`,
`target_hidden_size` and the aux count from the exported config.json), the eagle3
`LlamaDecoderLayer.__init__`, `LlamaModel.forward`, `LlamaDecoderLayer.forward` and
`LlamaForCausalLMEagle3.load_weights`. Stand-ins replace only SGLang's GPU building blocks, each
as SGLang defines it: `RMSNorm` (`layers/layernorm.py` `forward_native`: with a residual, add
first and return the sum as the new residual), the fused `qkv_proj` and `gate_up_proj` whose
`weight_loader` places a shard, `LlamaMLP` (`down(silu(gate) * up)`) and the attention, run on
one token (its own key only: softmax over one score is 1, so rope and the kernel drop out).
"""

from __future__ import annotations

import contextlib
import json
import types

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from sglang_source import VERSIONS, load, method_of
from torch import nn

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.drafter.load import load_drafter
from eyas.export.drafter import export_drafter
from eyas.train.checkpoint import save_drafter

LLAMA_EAGLE3 = "sglang/srt/models/llama_eagle3.py"
V, H, HT = 48, 32, 24


class RMSNorm(nn.Module):
    """`sglang/srt/layers/layernorm.py` `RMSNorm.forward_native`."""

    def __init__(self, hidden_size, eps=1e-6, **_):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x, residual=None):
        if residual is not None:
            x = x + residual
            residual = x
        var = x.float().pow(2).mean(-1, keepdim=True)
        out = (x.float() * torch.rsqrt(var + self.variance_epsilon)).to(x.dtype) * self.weight
        return out if residual is None else (out, residual)


def _sharded(rows: dict) -> nn.Parameter:
    """A fused weight whose `weight_loader(param, w, shard_id)` writes shard `shard_id`'s rows."""
    offsets, start = {}, 0
    for shard, n in rows.items():
        offsets[shard] = (start, n)
        start += n
    param = nn.Parameter(torch.zeros(start, 0))

    def weight_loader(p, w, shard_id):
        if p.shape[1] == 0:  # sized on first load (the input width comes from the weight)
            p.data = torch.zeros(start, w.shape[1])
        lo, n = offsets[shard_id]
        assert w.shape[0] == n, (shard_id, w.shape)
        p.data[lo : lo + n] = w

    param.weight_loader = weight_loader
    return param


class QKVParallelLinear(nn.Module):
    def __init__(self, hidden_size, head_dim, heads, kv_heads, bias=False, **_):
        super().__init__()
        self.sizes = (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)
        self.weight = _sharded(dict(zip("qkv", self.sizes)))

    def forward(self, x):
        return F.linear(x, self.weight), None


class Fused(nn.Module):
    """`gate_up_proj`: the gate and up rows in one weight (`MergedColumnParallelLinear`)."""

    def __init__(self, rows: dict):
        super().__init__()
        self.weight = _sharded(rows)


class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act, *_, **__):
        super().__init__()
        assert hidden_act == "silu"
        self.inter = intermediate_size
        self.gate_up_proj = Fused({0: intermediate_size, 1: intermediate_size})
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x):
        gate, up = F.linear(x, self.gate_up_proj.weight).split(self.inter, -1)
        return self.down_proj(F.silu(gate) * up)


class OneTokenAttention(nn.Module):
    """Llama attention on a single token: every head attends to its own key only."""

    def __init__(self, config):
        super().__init__()
        self.total_num_heads = config.num_attention_heads
        self.total_num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads
        )
        self.o_proj = nn.Linear(self.total_num_heads * self.head_dim, config.hidden_size, False)

    def forward(self, positions, hidden_states, forward_batch):
        assert hidden_states.shape[0] == 1, "the stand-in attends over one token"
        qkv, _ = self.qkv_proj(hidden_states)
        q_size, kv_size, _ = self.qkv_proj.sizes
        v = qkv[:, q_size + kv_size :].view(1, self.total_num_kv_heads, self.head_dim)
        group = self.total_num_heads // self.total_num_kv_heads
        out = v.repeat_interleave(group, 1).reshape(1, -1)  # softmax over one key is 1
        return self.o_proj(out)


class LlamaDecoderLayerBase(nn.Module):
    """What the eagle3 layer takes from `models/llama.py` `LlamaDecoderLayer.__init__`."""

    def __init__(self, config, *args, **kwargs):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.self_attn = OneTokenAttention(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)


def _sglang_module(version: str):
    return load(
        version,
        LLAMA_EAGLE3,
        RMSNorm=RMSNorm,
        QKVParallelLinear=QKVParallelLinear,
        LlamaMLP=LlamaMLP,
        LlamaDecoderLayer=LlamaDecoderLayerBase,
        VocabParallelEmbedding=lambda v, h, **_: nn.Embedding(v, h),
        layer_stack=contextlib.nullcontext,
        add_prefix=lambda name, prefix: f"{prefix}.{name}" if prefix else name,
        DraftParallelSpec=lambda **_: None,  # 0.5.23: a class attribute for tensor parallelism
    )


def sglang_drafter(version: str, export_dir):
    """SGLang's draft model from an export directory, its weights loaded by its own loader.
    Returns (model shell, the parameter names the loader wrote)."""
    config = types.SimpleNamespace(**json.loads((export_dir / "config.json").read_text()))
    module = _sglang_module(version)
    shell = nn.Module()
    shell.model = module.LlamaModel(config)  # SGLang's __init__ reads the config
    shell.lm_head = nn.Linear(config.hidden_size, config.draft_vocab_size, bias=False)
    shell.config, shell.hot_token_id = config, None
    loaded: set[str] = set()
    for name, p in shell.named_parameters():
        inner = getattr(p, "weight_loader", None)

        def record(param, w, *shard, _name=name, _inner=inner):
            loaded.add(_name)
            if _inner is not None:
                return _inner(param, w, *shard)
            param.data = w.to(torch.float32).clone()

        p.weight_loader = record
    load_weights = method_of(version, LLAMA_EAGLE3, "LlamaForCausalLMEagle3", "load_weights")
    load_weights.__globals__.update(torch=torch, default_weight_loader=None)
    weights = load_file(str(export_dir / "model.safetensors"))
    load_weights(shell, ((k, v.float()) for k, v in weights.items()))
    return shell, loaded


def sglang_first_step(shell, token: int, aux: torch.Tensor):
    """SGLang's `LlamaModel.forward` for one token: (logits, the state for the next step)."""
    mode = types.SimpleNamespace(
        is_extend=lambda: True,
        is_draft_extend=lambda **_: False,
        is_draft_extend_v2=lambda: False,
    )
    batch = types.SimpleNamespace(
        forward_mode=mode,
        contains_mm_inputs=lambda: False,
        mm_input_embeds=None,
        spec_info=types.SimpleNamespace(hidden_states=aux),
    )
    to_logits, (fed,) = shell.model(torch.tensor([token]), torch.zeros(1, dtype=torch.long), batch)
    return shell.lm_head(to_logits), fed


def tiny(v31: bool, seed: int) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = Eagle3Config(
        hidden_size=H,
        intermediate_size=40,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=V,
        draft_vocab_size=V,
        target_hidden_size=HT,
        aux_layer_ids=[2, 3, 5],
        fc_norm=v31,
        norm_output=v31,
    )
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.4)
        model.t2d.fill_(True)
    return model


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("v31", [False, True], ids=["eagle3", "eagle3.1"])
def test_sglang_serves_the_exported_drafter_as_trained(tmp_path, version, v31):
    model = tiny(v31, seed=11)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "sglang", tmp_path / "s", engine_version=version)
    shell, loaded = sglang_drafter(version, out)
    # nothing the loader skips: every parameter of SGLang's model got a tensor of the export
    assert loaded == {n for n, _ in shell.named_parameters()}
    assert (shell.model.fc_norm is not None) is v31 and bool(shell.model.norm_output) is v31
    assert shell.model.hidden_size_in == HT and shell.model.num_aux_hidden_states == 3
    exported = load_drafter(out).float()  # the bf16 weights SGLang loads, in eyas's model
    for token in (3, 17, 40):
        aux = torch.randn(1, 3 * HT) * torch.tensor([1.0, 6.0, 0.2]).repeat_interleave(HT)
        with torch.no_grad():
            logits, fed = sglang_first_step(shell, token, aux)
            normed, want_fed = exported.step(
                torch.tensor([[token]]), exported.fuse(aux[None]), torch.arange(1), []
            )
            want_logits = exported.logits(normed)
        assert torch.allclose(logits, want_logits[0], atol=1e-4), (token, version)
        assert torch.allclose(fed, want_fed[0], atol=1e-4), (token, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_would_serve_eagle3_1_wrongly_without_its_keys(tmp_path, version):
    """The control: the same EAGLE-3.1 weights under a config without `fc_norm`/`norm_output`
    (what an SGLang <= 0.5.11 effectively reads) compute something else, which is why the
    export names the version it needs."""
    model = tiny(True, seed=12)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "sglang", tmp_path / "s", engine_version=version)
    shell, _ = sglang_drafter(version, out)
    cfg = json.loads((out / "config.json").read_text())
    cfg.pop("fc_norm"), cfg.pop("norm_output")
    (out / "config.json").write_text(json.dumps(cfg))
    old, loaded = sglang_drafter(version, out)
    assert old.model.fc_norm is None and "model.fc_norm.0.weight" not in loaded
    aux = torch.randn(1, 3 * HT) * 4
    with torch.no_grad():
        right, right_fed = sglang_first_step(shell, 5, aux)
        wrong, wrong_fed = sglang_first_step(old, 5, aux)
    assert not torch.allclose(right, wrong, atol=1e-2)
    assert not torch.allclose(right_fed, wrong_fed, atol=1e-2)
