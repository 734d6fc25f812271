"""The P-EAGLE draft model (arXiv 2602.01469): EAGLE-3's one-layer drafter that drafts K tokens
in one forward, as speculators 0.9.0 trains it (`speculators/models/peagle/core.py`
`PEagleDraftModel`) and vLLM serves it (`llama_eagle3.py` `Eagle3LlamaForCausalLM` with
`parallel_drafting`). Tensor names are EAGLE-3's (`eyas.drafter.eagle3.model`), plus one:

    mask_hidden     [1, 1, n*Ht]  the fused target state of every parallel position, learnt;
                                  it goes through `fc` like a real one (vLLM: the proposer's
                                  `combine_hidden_states(mask_hidden)`, once, at load)

Parallel drafting after a verified position a (the last whose target state h_a is known, x_{a+1}
the token the target just produced): depth 0 reads (x_{a+1}, fc(h_a)) at position a, exactly
EAGLE-3's first step; depth d >= 1 reads (mask token, fc(mask_hidden)) at position a + d. Every
depth attends to the context's depth-0 keys at positions <= a and to its own chain's depths
1..d, never to another anchor's; depth d predicts x_{a+2+d}. That is EAGLE-3's training-time
test with the fed-back token and state replaced by the mask's, so the training forward is
EAGLE-3's TTT unroll (`DecoderLayer` and `ttt_attention`, memory linear in T) with those inputs;
no depth waits for another's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from eyas.drafter.eagle3.model import DecoderLayer, Eagle3Config
from eyas.drafter.layers import RMSNorm


@dataclass
class PEagleConfig(Eagle3Config):
    """EAGLE-3's config (MHA, one layer, no EAGLE-3.1 norms) and the parallel drafting's."""

    mask_token_id: int = 0
    depths: int = 8  # draft positions trained, depth 0 .. depths - 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.depths < 2:
            raise ValueError(f"P-EAGLE drafts at least 2 positions in parallel, not {self.depths}")

    @property
    def method(self) -> str:
        return "peagle"


class PEagleDrafter(nn.Module):
    method = "peagle"

    def __init__(self, cfg: PEagleConfig):
        super().__init__()
        self.config = cfg
        fused = len(cfg.aux_layer_ids) * cfg.target_hidden_size
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)  # the target's; frozen
        self.fc = nn.Linear(fused, cfg.hidden_size, bias=False)
        self.midlayer = DecoderLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.lm_head.weight.requires_grad_(cfg.draft_head != "frozen")
        # speculators initialises it so (`PEagleDraftModel.__init__`: torch.randn)
        self.mask_hidden = nn.Parameter(torch.randn(1, 1, fused))
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        self._register_load_state_dict_pre_hook(_speculators_names)

    def draft_to_target(self) -> torch.Tensor:
        """Target id of each draft id: [Dv]."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def fuse(self, aux_hidden: torch.Tensor) -> torch.Tensor:
        """[..., n*Ht] target states -> [..., H]."""
        return self.fc(aux_hidden)

    def mask_state(self) -> torch.Tensor:
        """[1, 1, H]: the fused state of every parallel position."""
        return self.fuse(self.mask_hidden)

    def logits(self, normed: torch.Tensor) -> torch.Tensor:
        """[..., H] -> [..., Dv]; the training loss calls it chunk by chunk."""
        return self.lm_head(normed)

    def _depth(self, input_ids, hidden, positions, cache):
        """One depth over every anchor: (normalised state [B, T, H], its k, v)."""
        out, k, v = self.midlayer(self.embed_tokens(input_ids), hidden, positions, cache)
        return self.norm(out), k, v

    def _depth_alone(self, input_ids, hidden, positions, *cached):
        """`_depth` as a function of its inputs (the lower depths' keys and values flattened):
        what activation checkpointing recomputes."""
        cache = [(cached[i], cached[i + 1]) for i in range(0, len(cached), 2)]
        return self._depth(input_ids, hidden, positions, cache)

    def forward(
        self,
        input_ids: torch.Tensor,
        aux_hidden: torch.Tensor,
        depths: int,
        checkpoint_layers: bool = False,
    ) -> list[torch.Tensor]:
        """Every depth at every anchor.

        Args:
            input_ids: [B, T] tokens x_{j+1} for anchor j (the sequence shifted left by one).
            aux_hidden: [B, T, n*Ht] the target states h_j of the fused layers.
            depths: D. Depth d at anchor j sits at position j + d and predicts x_{j+2+d}.
            checkpoint_layers: keep each depth's output and keys/values only, and recompute the
                layer's inside in backward (activation checkpointing, per depth).

        Returns:
            D normalised states [B, T, H] (`logits()` maps them to the draft vocabulary); the
            loss reads the COD-sampled anchors of each depth (`train.cod_sample`).
        """
        b, t = input_ids.shape
        real = self.fuse(aux_hidden)
        masked = self.mask_state().expand(b, t, -1)
        mask_ids = torch.full_like(input_ids, self.config.mask_token_id)
        cache: list = []
        per_depth = []
        for d in range(depths):
            ids, hidden = (input_ids, real) if d == 0 else (mask_ids, masked)
            positions = torch.arange(t, device=input_ids.device) + d
            if checkpoint_layers and torch.is_grad_enabled():
                flat = [x for kv in cache for x in kv]
                normed, k, v = checkpoint(
                    self._depth_alone, ids, hidden, positions, *flat, use_reentrant=False
                )
            else:
                normed, k, v = self._depth(ids, hidden, positions, cache)
            cache.append((k, v))  # here, in the root module, not inside the layer's unit
            per_depth.append(normed)
        return per_depth

    def cached(self, input_ids, hidden, positions, past_k, past_v, mask):
        """Decoding over a KV cache: (logits [B, n, Dv], this call's k, v); mask [n, L + n]
        (True = attend)."""
        out, k, v = self.midlayer.cached(
            self.embed_tokens(input_ids), hidden, positions, past_k, past_v, mask
        )
        return self.lm_head(self.norm(out)), k, v


def _speculators_names(state_dict: dict, prefix: str, *args) -> None:
    """speculators checkpoints name the decoder layer `layers.0.`, eyas's (and SGLang's)
    `midlayer.`, and keep `mask_hidden` at [1, 1, n*Ht] (vLLM reads any shape of that size)."""
    for key in [k for k in state_dict if k.startswith(prefix + "layers.0.")]:
        state_dict[prefix + "midlayer." + key[len(prefix + "layers.0.") :]] = state_dict.pop(key)
    key = prefix + "mask_hidden"
    if key in state_dict:
        state_dict[key] = state_dict[key].reshape(1, 1, -1)
