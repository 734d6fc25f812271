"""DFlash2 block drafting against a verifying target (batch 1): DFlash's block pass
(`DFlashProposer`), then the selector's walk instead of each slot's own argmax.

Per drafted slot j = 1..k the candidates are the target head's top K of its normalised state
(`compute_candidates` in vLLM and SGLang); the edges are
score[j, p, c] = unary[j, c] + <A[pred(j, p)] * proj(h_j), B[cand(j, c)]>, pred(1, .) the
anchor and pred(j, p) slot j-1's candidate p (`_score_edges`, both engines). The walk starts at
row 0 of slot 1 and at each slot takes the row of the candidate chosen before it: the argmax
at temperature 0, else a draw from softmax(row / T), which is the draft distribution the
verifier checks (zero outside the K candidates): vLLM `dflash2/speculator.py`
`_selector_walk_kernel`, SGLang `CandidateSelector.sample_path`.
"""

from __future__ import annotations

import torch

from eyas.drafter.dflash.decode import DFlashProposer
from eyas.drafter.dflash2.model import DFlash2Drafter


def block_edges(
    model: DFlash2Drafter, states: torch.Tensor, anchor: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(candidates [k, K], edge scores [k, K, K]) of a block's drafted slots, states [k, H]."""
    unary, candidates = model.lm_head(states).float().topk(model.candidate_selector.top_k, -1)
    return candidates, model.candidate_selector.edges(states, unary, candidates, anchor).float()


def walk(
    candidates: torch.Tensor,
    scores: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    vocab: int,
) -> tuple[list[int], list[torch.Tensor] | None]:
    """The drafted tokens, and at temperature > 0 each one's distribution over the vocabulary."""
    tokens, qs, previous = [], [], 0
    for row, cands in zip(scores, candidates):
        if temperature == 0:
            index = int(row[previous].argmax())
        else:
            q = torch.softmax(row[previous] / temperature, -1)
            index = int(torch.multinomial(q, 1, generator=generator))
            full = torch.zeros(vocab, device=q.device)
            qs.append(full.index_put_((cands,), q))
        tokens.append(int(cands[index]))
        previous = index
    return tokens, (qs if temperature > 0 else None)


class DFlash2Proposer(DFlashProposer):
    """`eyas.drafter.method.Proposer` for a DFlash2 drafter."""

    @torch.no_grad()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None):
        candidates, scores = block_edges(self.model, self.block_states(k), int(self.anchor))
        return walk(candidates, scores, temperature, generator, self.model.config.vocab_size)
