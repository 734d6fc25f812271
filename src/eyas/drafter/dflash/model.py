"""The DFlash draft model (arXiv 2602.06036): a block-diffusion drafter that drafts a whole
block in one non-causal pass, conditioned on fused target hidden states.

Semantics as z-lab's reference (`dflash/model.py` `DFlashDraftModel`), vLLM
(`vllm/model_executor/models/qwen3_dflash.py`) and SGLang (`python/sglang/srt/models/dflash.py`)
define them; eyas's own code:

    embed_tokens, lm_head   the target's, frozen (SGLang's model has neither; vLLM shares the
                            target's when the export ships none)
    fc, hidden_norm         context = hidden_norm(fc(concat of the fused target states)) [H]
    layers.{i}              Qwen3-style decoder layers: q_norm / k_norm per head before RoPE;
                            the block's queries attend to the context's keys and values
                            (k_norm(k_proj(context)), v_proj(context), the same context for
                            every layer) and to the whole block, non-causally
    norm                    final RMSNorm, then the target's lm_head

A block anchored at position a is [x_a, mask, ..., mask] at positions a .. a+bs-1, where x_a is
the token the target just produced (the bonus token when decoding) and its context the target
states of positions < a. Slot i >= 1 predicts x_{a+i}; slot 0 drafts nothing
(`sample_from_anchor: false`), so a block of bs drafts bs - 1 tokens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from eyas.drafter.layers import MLP, RMSNorm, merge_heads, split_heads
from eyas.drafter.rope import Rotary


@dataclass
class DFlashConfig:
    hidden_size: int  # = the target's: the context enters the layers' K/V at this width
    intermediate_size: int
    num_hidden_layers: int  # draft layers
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    target_hidden_size: int
    aux_layer_ids: list[int]  # HF hidden_states indices of the fused target layers
    block_size: int
    mask_token_id: int
    max_position_embeddings: int = 4096
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    head_dim: int = 0
    target_num_layers: int = 0
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.head_dim:
            self.head_dim = self.hidden_size // self.num_attention_heads
        if self.block_size < 2:
            raise ValueError(f"a DFlash block holds the anchor and >= 1 mask: {self.block_size}")

    @property
    def method(self) -> str:
        return "dflash"

    def to_dict(self) -> dict:
        return asdict(self)


class DFlashAttention(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        h, kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.h, self.kv, self.d = h, kv, d
        self.q_proj = nn.Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.rotary = Rotary(d, cfg.rope_theta, cfg.rope_scaling)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor):
        """k, v [B, kv, T, d] of x [B, T, H]: k normed per head, then rotated."""
        k = self.k_norm(split_heads(self.k_proj(x), self.kv, self.d))
        v = split_heads(self.v_proj(x), self.kv, self.d)
        return self.rotary.rotate(k, positions), v

    def forward(self, x, positions, ctx_k, ctx_v, groups=None):
        """x: [B, Q, H] the blocks' (normed) states at `positions` [B, Q]; ctx_k/v: [B, kv, L, d]
        the context's. `groups`: (query slice, mask [B, 1, q, L + q] with True = attend) per
        group of blocks, each attending to the context and its own queries' keys; None: one
        group, everything visible (decoding)."""
        q = self.rotary.rotate(self.q_norm(split_heads(self.q_proj(x), self.h, self.d)), positions)
        k, v = self.keys_values(x, positions)
        rep = self.h // self.kv
        outs = []
        for sl, mask in groups or [(slice(None), None)]:
            keys = torch.cat([ctx_k, k[:, :, sl]], 2).repeat_interleave(rep, 1)
            values = torch.cat([ctx_v, v[:, :, sl]], 2).repeat_interleave(rep, 1)
            outs.append(F.scaled_dot_product_attention(q[:, :, sl], keys, values, attn_mask=mask))
        return self.o_proj(merge_heads(torch.cat(outs, 2)))


class DFlashLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DFlashAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, h, positions, *, kv=None, context=None, context_positions=None, groups=None):
        """The context's keys and values are `kv` (decoding keeps them), or are projected here
        from `context` (training: inside the layer's own forward, as FSDP2 shards it)."""
        if kv is None:
            kv = self.self_attn.keys_values(context, context_positions)
        attn = self.self_attn(self.input_layernorm(h), positions, *kv, groups)
        h = h + attn
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(nn.Module):
    method = "dflash"
    layer_cls: type[nn.Module] = DFlashLayer  # a variant's own layer (DFlash2's convolutions)

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)  # the target's; frozen
        self.fc = nn.Linear(
            len(cfg.aux_layer_ids) * cfg.target_hidden_size, cfg.hidden_size, bias=False
        )
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(self.layer_cls(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight.requires_grad_(False)  # the target's; frozen

    def context(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, n*Ht] fused target states -> [B, T, H] context states."""
        return self.hidden_norm(self.fc(aux_hidden))

    def context_kv(self, ctx: torch.Tensor, positions: torch.Tensor) -> list[tuple]:
        """Per layer, the context's (k, v) [B, kv, T, d] at `positions`."""
        return [layer.self_attn.keys_values(ctx, positions) for layer in self.layers]

    def blocks(self, block_ids, positions, kv: list[tuple]) -> torch.Tensor:
        """Decoding: block_ids, positions [B, Q] after a context whose per-layer keys and values
        are `kv` (`context_kv`), everything visible. Returns the normalised block states
        [B, Q, H] (`self.lm_head` maps them to logits)."""
        h = self.embed_tokens(block_ids)
        for layer, layer_kv in zip(self.layers, kv):
            h = layer(h, positions, kv=layer_kv)
        return self.norm(h)

    def forward(
        self,
        input_ids: torch.Tensor,
        aux_hidden: torch.Tensor,
        anchors: torch.Tensor,
        group: int = 64,
        checkpoint_layers: bool = False,
    ) -> torch.Tensor:
        """The training forward: every anchored block of every row in one pass.

        Args:
            input_ids: [B, T] the sequences (x_a is read at each anchor).
            aux_hidden: [B, T, n*Ht] the target states of the fused layers.
            anchors: [B, A] anchor positions a >= 0 (padding anchors: any, masked by the loss).
            group: blocks per attention call: blocks never see each other, so the masks and
                scores grow with the group, not with A.
            checkpoint_layers: recompute each draft layer's inside in backward (activation
                checkpointing) instead of keeping it.

        Returns:
            [B, A, bs, H] normalised states; slot i of the block at a predicts x_{a+i}.
        """
        cfg = self.config
        b, t = input_ids.shape
        a_count, bs = anchors.shape[1], cfg.block_size
        device = input_ids.device
        ctx_pos = torch.arange(t, device=device)
        ids = torch.full((b, a_count, bs), cfg.mask_token_id, dtype=torch.long, device=device)
        ids[..., 0] = input_ids.gather(1, anchors)
        positions = (anchors[..., None] + torch.arange(bs, device=device)).reshape(b, -1)
        own = torch.block_diag(*[torch.ones(bs, bs, dtype=torch.bool, device=device)] * group)
        groups = []
        for start in range(0, a_count, group):
            a = anchors[:, start : start + group]  # [B, G]
            q = a.shape[1] * bs
            # a block sees the context strictly before its anchor, and itself
            before = (ctx_pos[None, None, :] < a[..., None]).repeat_interleave(bs, 1)
            mask = torch.cat([before, own[:q, :q].expand(b, -1, -1)], -1)[:, None]
            groups.append((slice(start * bs, start * bs + q), mask))
        context = self.context(aux_hidden)
        h = self.embed_tokens(ids.reshape(b, -1))
        for layer in self.layers:
            kw = {"context": context, "context_positions": ctx_pos, "groups": groups}
            if checkpoint_layers and torch.is_grad_enabled():
                h = checkpoint(layer, h, positions, use_reentrant=False, **kw)
            else:
                h = layer(h, positions, **kw)
        return self.norm(h).view(b, a_count, bs, -1)
