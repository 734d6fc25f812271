"""EAGLE-3 incremental drafting: chains and SGLang-style trees, on the drafter's KV cache.

The drafter's context pairs, at position j, the target's fused state h_j with the token
x_{j+1} that follows it; `extend` appends verified pairs. A chain feeds the drafter's own
output state forward from the last verified position, one token at a time, exactly as the TTT
unroll trains it (draft step k at position j + k). A tree expands every frontier node by its
top-N at once, each node attending to the verified context and its own ancestors
(`--speculative-eagle-topk N --speculative-num-draft-tokens M --speculative-num-steps K`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eyas.drafter.eagle3.model import Eagle3Drafter
from eyas.drafter.method import TreeNode


def _sample(probs: torch.Tensor, gen: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


@dataclass
class _Expanded:
    token: int  # target id
    score: float  # cumulative log-probability under the drafter
    parent: int  # index in the node list; -1 = the root (last verified token)
    depth: int
    col: int = -1  # column of its keys in the tree cache
    hidden: torch.Tensor | None = None  # the drafter's state here, fed to its children
    logprobs: torch.Tensor | None = None  # next-token log-probs here [Dv]


class Eagle3Proposer:
    """`eyas.drafter.method.Proposer` for an EAGLE-3(.1) drafter (batch 1)."""

    def __init__(self, model: Eagle3Drafter):
        self.model = model
        self.aux_layers = list(model.config.aux_layer_ids)
        self.device = model.d2t.device
        self.d2t = model.draft_to_target()
        self.k: torch.Tensor | None = None  # [1, h, L, d] keys of the verified context
        self.v: torch.Tensor | None = None
        self.logits: torch.Tensor | None = None  # [Dv] at the last verified position
        self.hidden: torch.Tensor | None = None  # [1, 1, H] fed back from it

    @property
    def verified(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    @torch.no_grad()
    def _forward(self, ids: list[int], hidden: torch.Tensor, commit: bool):
        """Causal forward of `ids` after the verified context: (logits [1, n, Dv], fed-back
        hidden [1, n, H]); `commit` appends the keys to the context."""
        n, past = len(ids), self.verified
        positions = torch.arange(past, past + n, device=self.device)
        mask = torch.ones(n, past + n, dtype=torch.bool, device=self.device).tril(past)
        logits, out, k, v = self.model.cached_step(
            torch.tensor([ids], device=self.device), hidden, positions, self.k, self.v, mask
        )
        if commit:
            self.k = k if self.k is None else torch.cat([self.k, k], 2)
            self.v = v if self.v is None else torch.cat([self.v, v], 2)
        return logits, out

    @torch.no_grad()
    def extend(self, tokens_after: list[int], aux: torch.Tensor) -> None:
        logits, out = self._forward(tokens_after, self.model.fuse(aux.float()), commit=True)
        self.logits, self.hidden = logits[0, -1], out[:, -1:]

    @torch.no_grad()
    def propose(self, k: int, temperature: float, generator: torch.Generator | None):
        """A chain of k drafts; the drafts' keys never enter the verified context."""
        logits, hidden = self.logits, self.hidden
        past_k, past_v = self.k, self.v
        drafts, qs = [], []
        for i in range(k):
            if temperature == 0:
                d = int(self.d2t[logits.argmax()])
            else:
                q = torch.zeros(self.model.config.vocab_size, device=self.device)
                q[self.d2t] = torch.softmax(logits.float() / temperature, -1)
                qs.append(q)
                d = _sample(q, generator)
            drafts.append(d)
            if i + 1 < k:
                logits_i, hidden = self._forward([d], hidden, commit=True)
                logits = logits_i[0, -1]
        self.k, self.v = past_k, past_v  # drop the chain's keys: `extend` adds the verified
        return drafts, (qs if temperature != 0 else None)

    # -- trees ---------------------------------------------------------------------------------

    @torch.no_grad()
    def _expand(self, nodes: list[_Expanded], frontier: list[int], tree_kv: list) -> None:
        """One drafter forward over the frontier: each node attends to the verified context,
        its ancestors and itself; fills their `hidden` and `logprobs`."""
        root_hidden = self.hidden
        ids = [nodes[i].token for i in frontier]
        hidden = torch.cat(
            [
                nodes[nodes[i].parent].hidden if nodes[i].parent >= 0 else root_hidden
                for i in frontier
            ],
            1,
        )
        past = self.verified
        positions = torch.tensor([past + nodes[i].depth - 1 for i in frontier], device=self.device)
        prev = sum(k.shape[2] for k, _ in tree_kv)  # tree keys written by earlier levels
        n = len(frontier)
        mask = torch.zeros(n, past + prev + n, dtype=torch.bool, device=self.device)
        mask[:, :past] = True
        for row, i in enumerate(frontier):
            nodes[i].col = prev + row
            a = i
            while a >= 0:
                mask[row, past + nodes[a].col] = True
                a = nodes[a].parent
        keys = torch.cat([self.k, *(k for k, _ in tree_kv)], 2)
        values = torch.cat([self.v, *(v for _, v in tree_kv)], 2)
        logits, out, k, v = self.model.cached_step(
            torch.tensor([ids], device=self.device), hidden, positions, keys, values, mask
        )
        tree_kv.append((k, v))
        logprobs = torch.log_softmax(logits[0].float(), -1)
        for row, i in enumerate(frontier):
            nodes[i].hidden = out[:, row : row + 1]
            nodes[i].logprobs = logprobs[row]

    @torch.no_grad()
    def tree(self, depth: int, topk: int, num_nodes: int) -> list[TreeNode]:
        """SGLang's EAGLE tree: expand the top-N frontier by cumulative log-probability for
        `depth` levels, keep the `num_nodes` best nodes (ancestor-closed, since scores only
        fall along a path), ordered by depth."""
        root = torch.log_softmax(self.logits.float(), -1)
        best = torch.topk(root, topk)
        nodes = [
            _Expanded(int(self.d2t[t]), lp, -1, 1)
            for lp, t in zip(best.values.tolist(), best.indices.tolist())
        ]
        frontier = list(range(len(nodes)))
        tree_kv: list = []
        for level in range(2, depth + 1):
            self._expand(nodes, frontier, tree_kv)
            candidates = []
            for i in frontier:
                child = torch.topk(nodes[i].logprobs, topk)
                for lp, t in zip(child.values.tolist(), child.indices.tolist()):
                    candidates.append((nodes[i].score + lp, int(self.d2t[t]), i))
            candidates.sort(key=lambda c: -c[0])
            frontier = []
            for score, tok, parent in candidates[:topk]:
                nodes.append(_Expanded(tok, score, parent, level))
                frontier.append(len(nodes) - 1)
        order = sorted(range(len(nodes)), key=lambda i: -nodes[i].score)[:num_nodes]
        keep = sorted(order, key=lambda i: (nodes[i].depth, i))
        remap = {old: new for new, old in enumerate(keep)}
        remap[-1] = -1
        # scores never rise along a path and ties keep parents first: the selection holds every
        # selected node's parent
        return [TreeNode(nodes[i].token, remap[nodes[i].parent], nodes[i].depth) for i in keep]
