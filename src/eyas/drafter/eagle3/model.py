"""The EAGLE-3 draft model, in one file (EAGLE-3 paper, arXiv 2503.01840), with the two
EAGLE-3.1 normalisation fixes as options (arXiv 2605.09992; speculators
`src/speculators/models/eagle3/config.py` `fc_norm`, `norm_output`).

Tensor names and config fields follow SGLang's `LlamaForCausalLMEagle3`, so export is a save:

    embed_tokens            frozen copy of the target's input embedding          [V, H]
    fc_norm.{0,1,2}         EAGLE-3.1: one RMSNorm per fused target layer        [Ht]
    fc                      fuses the target hidden states, no bias              [H, 3*Ht]
    midlayer.*              one Llama decoder layer whose attention input is
                            [input_layernorm(embed) ; hidden_norm(fused)] (2H)
    norm, lm_head           final RMSNorm and the head over the draft vocabulary [Dv, H]
                            (initialised from the target's rows; `draft_head` frozen or not)
    d2t, t2d                draft id -> target id offset; target-in-draft mask

Training-time test (TTT): step 0 feeds the target's fused hidden states; step k >= 1 feeds the
drafter's own output hidden state from step k-1 at the same index (EAGLE-3.1 `norm_output`:
that state after the final norm, as vLLM `llama_eagle3.py` `LlamaModel.forward` returns it as
`aux_output`). The query of step k at index j attends to step-0 keys at positions <= j (the
real context) plus the keys of steps 1..k at index j (its own draft chain) -- exactly what
decoding does, where draft step k sits at sequence position j + k.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from eyas.drafter.layers import MLP, RMSNorm, split_heads
from eyas.drafter.mla import MLAAttention
from eyas.drafter.rope import Rotary
from eyas.drafter.ttt_attention import ttt_attention, ttt_attention_fast


@dataclass
class Eagle3Config:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    aux_layer_ids: list[int]  # HF hidden_states indices = vLLM capture ids
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # the target's (YaRN for Kimi-K2.5)
    head_dim: int = 0  # derived when 0
    target_num_layers: int = 0
    # speculators' option: the residual stream starts from hidden_norm(fused) instead of fused
    norm_before_residual: bool = False
    # EAGLE-3.1: a per-aux-layer RMSNorm before fc, and the post-norm state fed back
    fc_norm: bool = False
    norm_output: bool = False
    # "mla": DeepSeek-V3 attention (`eyas.drafter.mla`) with these dims (the target's)
    attention: str = "mha"
    q_lora_rank: int | None = None
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # "frozen": the draft head keeps the target's rows it is initialised with (speculators')
    draft_head: str = "trained"
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if len(self.aux_layer_ids) != 3:
            raise ValueError(f"EAGLE-3 fuses exactly 3 target layers, got {self.aux_layer_ids}")

    @property
    def method(self) -> str:
        return "eagle3.1" if (self.fc_norm or self.norm_output) else "eagle3"

    def to_dict(self) -> dict:
        return asdict(self)


class Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        h, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.h, self.kv, self.d = h, kv, d
        self.q_proj = nn.Linear(2 * cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)
        self.rotary = Rotary(d, cfg.rope_theta, cfg.rope_scaling)

    def project(
        self, x: torch.Tensor, positions: torch.Tensor, repeat: bool = True, compiled: bool = False
    ):
        """q: [B, h, T, d]; k, v: [B, h, T, d] (kv heads repeated for GQA), or [B, kv, T, d]
        with `repeat=False` (the fast path's kernel reads each kv head for its group).
        `compiled`: the rotation through `torch.compile` (`--fast-path compiled`)."""
        q = split_heads(self.q_proj(x), self.h, self.d)
        k = split_heads(self.k_proj(x), self.kv, self.d)
        v = split_heads(self.v_proj(x), self.kv, self.d)
        rotate = self.rotary.rotate
        q, k = rotate(q, positions, compiled), rotate(k, positions, compiled)
        rep = self.h // self.kv
        if not repeat or rep == 1:
            return q, k, v
        return q, k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

    def output(self, out: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.h * self.d))

    def forward(self, x, positions, cache: list[tuple[torch.Tensor, torch.Tensor]], fast=False):
        """TTT attention. `cache` holds (k, v) of earlier steps; step 0's are attended
        causally, later steps' only on the diagonal (same index j). Returns (output, k, v);
        the caller keeps k, v (the list is read, never appended to: FSDP2 rebuilds a unit's
        argument containers, so an append inside a unit would be lost). `fast`: the fast
        path's attention (`ttt_attention_fast`; k, v keep their kv heads), "compiled" with its
        merge compiled."""
        compiled = fast == "compiled"
        q, k, v = self.project(x, positions, repeat=not fast, compiled=compiled)
        steps = [*cache, (k, v)]
        k0, v0 = steps[0]
        scale = 1.0 / math.sqrt(self.d)
        if fast:
            out = ttt_attention_fast(q, k0, v0, steps[1:], scale, compiled=compiled)
        else:
            out = ttt_attention(q, k0, v0, steps[1:], scale)
        return self.output(out), k, v

    def cached(self, x, positions, past_k, past_v, mask):
        """Decoding attention over `past` keys plus this call's own: mask [T, L + T] (True =
        attend). Returns (output [B, T, H], k, v of this call)."""
        q, k, v = self.project(x, positions)
        keys = k if past_k is None else torch.cat([past_k, k], 2)
        values = v if past_v is None else torch.cat([past_v, v], 2)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.output(out), k, v


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.norm_before_residual = cfg.norm_before_residual
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.attention == "mla":
            self.self_attn = MLAAttention(cfg, 2 * cfg.hidden_size)
        else:
            self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def _inputs(self, embeds, hidden, compiled=False):
        """(attention input [B, T, 2H], residual [B, T, H]); the residual stream is the
        fused/previous hidden state (or its norm, `norm_before_residual`). `compiled`: the
        norms through `torch.compile` (`--fast-path compiled`), as in `_finish`."""
        normed = self.hidden_norm(hidden, compiled)
        x = torch.cat([self.input_layernorm(embeds, compiled), normed], -1)
        return x, (normed if self.norm_before_residual else hidden)

    def _finish(self, residual, attn_out, compiled=False):
        h = residual + attn_out
        return h + self.mlp(self.post_attention_layernorm(h, compiled), compiled)

    def forward(self, embeds, hidden, positions, cache, fast=False):
        """One TTT step of the layer: (output, this step's k, v)."""
        compiled = fast == "compiled"
        x, residual = self._inputs(embeds, hidden, compiled)
        out, k, v = self.self_attn(x, positions, cache, fast=fast)
        return self._finish(residual, out, compiled), k, v

    def cached(self, embeds, hidden, positions, past_k, past_v, mask):
        x, residual = self._inputs(embeds, hidden)
        out, k, v = self.self_attn.cached(x, positions, past_k, past_v, mask)
        return self._finish(residual, out), k, v


class Eagle3Drafter(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.config = cfg
        self.method = cfg.method
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)  # the target's; frozen
        if cfg.fc_norm:
            self.fc_norm = nn.ModuleList(
                RMSNorm(cfg.target_hidden_size, cfg.rms_norm_eps) for _ in cfg.aux_layer_ids
            )
        self.fc = nn.Linear(
            len(cfg.aux_layer_ids) * cfg.target_hidden_size, cfg.hidden_size, bias=False
        )
        self.midlayer = DecoderLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.lm_head.weight.requires_grad_(cfg.draft_head != "frozen")
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self._register_load_state_dict_pre_hook(_speculators_names)

    def draft_to_target(self) -> torch.Tensor:
        """Target id of each draft id: [Dv]."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def fuse(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """[..., 3*Ht] target states -> [..., H] (EAGLE-3.1: each layer's state normed first,
        as vLLM `Eagle3LlamaForCausalLM.combine_hidden_states` does)."""
        if self.config.fc_norm:
            chunks = aux_hidden.chunk(len(self.fc_norm), -1)
            aux_hidden = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks)], -1)
        return self.fc(aux_hidden)

    def _fed_back(self, normed: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return normed if self.config.norm_output else out

    def step(self, input_ids, hidden, positions, cache, fast=False):
        """One TTT step. input_ids: [B, T]; hidden: [B, T, H] -> (normalised hidden for the
        head [B, T, H], hidden for the next step [B, T, H])."""
        embeds = self.embed_tokens(input_ids)
        out, k, v = self.midlayer(embeds, hidden, positions, cache, fast=fast)
        cache.append((k, v))  # here, in the root module, not inside the layer's unit
        normed = self.norm(out, fast == "compiled")
        return normed, self._fed_back(normed, out)

    def cached_step(self, input_ids, hidden, positions, past_k, past_v, mask):
        """One decoding step over a KV cache: (logits [B, T, Dv], hidden for the next step,
        this step's k, v [B, h, T, d])."""
        out, k, v = self.midlayer.cached(
            self.embed_tokens(input_ids), hidden, positions, past_k, past_v, mask
        )
        normed = self.norm(out)
        return self.lm_head(normed), self._fed_back(normed, out), k, v

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., Dv]; the training loss calls it chunk by chunk."""
        return self.lm_head(normed)

    def _step_alone(self, input_ids, hidden, positions, *cached, fast=False):
        """`step` as a function of its inputs (the earlier steps' keys and values flattened),
        returning this step's k, v too: what activation checkpointing recomputes."""
        cache = [(cached[i], cached[i + 1]) for i in range(0, len(cached), 2)]
        normed, fed_back = self.step(input_ids, hidden, positions, cache, fast=fast)
        return normed, fed_back, *cache[-1]

    def forward(
        self,
        input_ids: torch.Tensor,
        aux_hidden: torch.Tensor,
        ttt_steps: int,
        checkpoint_layers: bool = False,
        fast: bool | str = False,
    ):
        """Unrolled TTT forward.

        Args:
            input_ids: [B, T] tokens x_{j+1} for index j (the sequence shifted left by one).
            aux_hidden: [B, T, 3*Ht] target hidden states h_j of the three aux layers.
            ttt_steps: K. Step k at index j reads token x_{j+1+k} and predicts x_{j+2+k}.
            checkpoint_layers: keep only each step's outputs and keys/values, and recompute
                the layer's inside in backward (activation checkpointing, per TTT step).
            fast: the fast path's attention (`ttt_attention_fast`), same function; "compiled":
                with its merge compiled (`--fast-path compiled`).

        Returns:
            list of K normalised hidden states [B, T, H] (`logits()` maps them to the draft
            vocabulary); step k uses input_ids shifted left by k (positions past the end repeat
            the last token and are masked by the loss).
        """
        b, t = input_ids.shape
        hidden = self.fuse(aux_hidden)  # [B, T, H]
        cache: list = []
        per_step = []
        for k in range(ttt_steps):
            ids_k = torch.cat([input_ids[:, k:], input_ids[:, -1:].expand(b, min(k, t))], 1)[:, :t]
            positions = torch.arange(t, device=input_ids.device) + k
            if checkpoint_layers and torch.is_grad_enabled():
                flat = [x for kv in cache for x in kv]
                normed, hidden, k_s, v_s = checkpoint(
                    self._step_alone, ids_k, hidden, positions, *flat, use_reentrant=False,
                    fast=fast,
                )  # fmt: skip
                cache.append((k_s, v_s))
            else:
                normed, hidden = self.step(ids_k, hidden, positions, cache, fast=fast)
            per_step.append(normed)
        return per_step


def _speculators_names(state_dict: dict, prefix: str, *args) -> None:
    """speculators checkpoints name the decoder layer `layers.0.`; SGLang's (and eyas's) name
    it `midlayer.`; older SGLang drafters name EAGLE-3.1's norms `aux_norm_{low,mid,high}`
    (`llama_eagle3.py` `legacy_name_map`). The hook renames on load, so `forward` never sees
    the difference."""
    for key in [k for k in state_dict if k.startswith(prefix + "layers.0.")]:
        state_dict[prefix + "midlayer." + key[len(prefix + "layers.0.") :]] = state_dict.pop(key)
    for i, old in enumerate(("aux_norm_low", "aux_norm_mid", "aux_norm_high")):
        for key in [k for k in state_dict if k.startswith(f"{prefix}{old}.")]:
            state_dict[f"{prefix}fc_norm.{i}." + key[len(f"{prefix}{old}.") :]] = state_dict.pop(
                key
            )
