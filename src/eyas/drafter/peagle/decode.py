"""P-EAGLE parallel drafting against a verifying target (batch 1), as vLLM drafts it.

The drafter's context pairs, at position j, the target's fused state h_j with the token x_{j+1}
that follows it; `extend` appends verified pairs to its KV cache and keeps the logits of the
last one (depth 0: the first draft). `propose(k)` runs one forward over k - 1 parallel
positions after it (the mask token, `fc(mask_hidden)`, positions a+1..a+k-1), each attending
to the context and to the parallel positions before it, and reads draft i + 1 off position i:
vLLM's V1 proposer (`v1/spec_decode/llm_base_proposer.py`: `_copy_and_expand_eagle_inputs`
appends `parallel_drafting_token_id` slots after the bonus token at the next positions, the
hidden state of each is `parallel_drafting_hidden_state_tensor` = `combine_hidden_states(
mask_hidden)`, and with `parallel_drafting` all K drafts are sampled from that one forward).
The drafts are sampled independently, each from its position's distribution.
"""

from __future__ import annotations

import torch

from eyas.drafter.peagle.model import PEagleDrafter


class PEagleProposer:
    """`eyas.drafter.method.Proposer` for a P-EAGLE drafter."""

    def __init__(self, model: PEagleDrafter):
        self.model = model
        self.aux_layers = list(model.config.aux_layer_ids)
        self.device = model.d2t.device
        self.d2t = model.draft_to_target()
        self.k: torch.Tensor | None = None  # [1, h, L, d] keys of the verified context
        self.v: torch.Tensor | None = None
        self.first: torch.Tensor | None = None  # [Dv] logits at the last verified position

    @property
    def verified(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    @torch.no_grad()
    def _forward(self, ids: list[int], hidden: torch.Tensor) -> tuple[torch.Tensor, tuple]:
        """Causal forward of `ids` after the verified context: (logits [n, Dv], (k, v))."""
        n, past = len(ids), self.verified
        positions = torch.arange(past, past + n, device=self.device)
        mask = torch.ones(n, past + n, dtype=torch.bool, device=self.device).tril(past)
        logits, k, v = self.model.cached(
            torch.tensor([ids], device=self.device), hidden, positions, self.k, self.v, mask
        )
        return logits[0], (k, v)

    @torch.no_grad()
    def extend(self, tokens_after: list[int], aux: torch.Tensor) -> None:
        logits, (k, v) = self._forward(tokens_after, self.model.fuse(aux.float()))
        self.k = k if self.k is None else torch.cat([self.k, k], 2)
        self.v = v if self.v is None else torch.cat([self.v, v], 2)
        self.first = logits[-1]

    @torch.no_grad()
    def draft_logits(self, k: int) -> torch.Tensor:
        """[k, Dv]: the last verified position's logits, then k - 1 parallel positions'."""
        if k == 1:
            return self.first[None]
        mask_id = self.model.config.mask_token_id
        hidden = self.model.mask_state().expand(1, k - 1, -1)
        parallel, _ = self._forward([mask_id] * (k - 1), hidden)  # never committed
        return torch.cat([self.first[None], parallel])

    @torch.no_grad()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None):
        logits = self.draft_logits(k).float()
        if temperature == 0:
            return [int(self.d2t[i]) for i in logits.argmax(-1)], None
        qs = []
        for row in logits:
            q = torch.zeros(self.model.config.vocab_size, device=self.device)
            q[self.d2t] = torch.softmax(row / temperature, -1)
            qs.append(q)
        drafts = [int(torch.multinomial(q, 1, generator=generator)) for q in qs]
        return drafts, qs
