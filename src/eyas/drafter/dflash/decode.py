"""DFlash block drafting against a verifying target (batch 1).

The drafter keeps, per layer, the keys and values of the verified context (the target states
of every position the target has processed); `extend` appends the newly verified positions and
remembers the token that follows them, the next block's anchor. `propose(k)` runs one
non-causal pass over [anchor, mask x k] at the next k + 1 positions and reads the k drafts off
slots 1..k, exactly as training reads a block (vLLM `vllm/v1/spec_decode/dflash.py`
`DFlashProposer`: the query tokens are `next_token_ids` then K mask tokens, the context K/V
pre-inserted; z-lab `dflash_generate`). The drafts of one block are sampled independently, each
from its slot's distribution, which is what the acceptance rule needs.
"""

from __future__ import annotations

import torch

from eyas.drafter.dflash.model import DFlashDrafter


class DFlashProposer:
    """`eyas.drafter.method.Proposer` for a DFlash drafter."""

    def __init__(self, model: DFlashDrafter):
        self.model = model
        self.aux_layers = list(model.config.aux_layer_ids)
        self.device = model.lm_head.weight.device
        self.kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.anchor: int | None = None

    @property
    def context_len(self) -> int:
        return 0 if self.kv is None else self.kv[0][0].shape[2]

    @torch.no_grad()
    def extend(self, tokens_after: list[int], aux: torch.Tensor) -> None:
        n, past = len(tokens_after), self.context_len
        positions = torch.arange(past, past + n, device=self.device)
        new = self.model.context_kv(self.model.context(aux.float()), positions)
        if self.kv is None:
            self.kv = new
        else:
            self.kv = [
                (torch.cat([k, nk], 2), torch.cat([v, nv], 2))
                for (k, v), (nk, nv) in zip(self.kv, new)
            ]
        self.anchor = tokens_after[-1]

    @torch.no_grad()
    def block_states(self, k: int) -> torch.Tensor:
        """[k, H] normalised states of slots 1..k of the block anchored after the verified
        context."""
        past = self.context_len
        ids = torch.tensor(
            [[self.anchor] + [self.model.config.mask_token_id] * k], device=self.device
        )
        positions = torch.arange(past, past + k + 1, device=self.device)[None]
        return self.model.blocks(ids, positions, self.kv)[0, 1:]

    @torch.no_grad()
    def block_logits(self, k: int) -> torch.Tensor:
        """[k, V] logits of slots 1..k of the block anchored after the verified context."""
        return self.model.lm_head(self.block_states(k)).float()

    @torch.no_grad()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None):
        logits = self.block_logits(k)
        if temperature == 0:
            return [int(t) for t in logits.argmax(-1)], None
        qs = list(torch.softmax(logits / temperature, -1))
        drafts = [int(torch.multinomial(q, 1, generator=generator)) for q in qs]
        return drafts, qs
