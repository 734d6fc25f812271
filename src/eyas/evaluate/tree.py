"""Tree drafts, as SGLang's EAGLE builds them (`--speculative-eagle-topk N
--speculative-num-draft-tokens M --speculative-num-steps K`), verified greedily and losslessly.

The tree comes from the method's tree proposer (`method.tree_proposer(drafter)`; EAGLE-3 has
one, DFlash drafts chains of blocks only); this module is the target side. One round:
1. the proposer builds the tree: at most M nodes, K levels, N children per expanded node;
2. verification: the target scores [last token, tree] in one forward with a tree attention
   mask (a node sees the verified context, the last token, its ancestors and itself, at
   position = its depth);
3. acceptance (temperature 0): from the root, follow the child whose token is the target's
   argmax while one exists; the target's argmax after the last accepted node is the bonus.
   The output is exactly the target's greedy decoding;
4. the target cache keeps the accepted path only; the proposer is extended with the target
   hidden states of the newly verified tokens, as in the chain.
"""

from __future__ import annotations

import torch

from eyas.drafter.method import TreeNode
from eyas.errors import EyasError
from eyas.evaluate.speculative import DecodeResult, TargetRunner, cut_at_stop


def _ancestors(tree: list[TreeNode], i: int) -> list[int]:
    path = []
    while i >= 0:
        path.append(i)
        i = tree[i].parent
    return path[::-1]


def _tree_mask(tree: list[TreeNode], prefix: int, device) -> torch.Tensor:
    """Additive mask [1, 1, 1 + M, prefix + 1 + M]: row 0 is the last verified token."""
    m = len(tree)
    allowed = torch.zeros(1 + m, prefix + 1 + m, dtype=torch.bool, device=device)
    allowed[:, : prefix + 1] = True
    for i in range(m):
        for a in _ancestors(tree, i):
            allowed[1 + i, prefix + 1 + a] = True
    mask = torch.zeros(allowed.shape, device=device)
    mask[~allowed] = torch.finfo(mask.dtype).min
    return mask[None, None]


@torch.no_grad()
def tree_decode(
    target,
    proposer,
    prompt_ids: list[int],
    *,
    depth: int,
    topk: int,
    num_draft_tokens: int,
    max_new_tokens: int,
    stop_ids: set[int],
    temperature: float = 0.0,
) -> DecodeResult:
    """Tree speculative decoding of one prompt (greedy); `target` is a HF causal LM and
    `proposer` a method's tree proposer."""
    if temperature != 0:
        raise EyasError("bad_flag", "tree drafts are evaluated greedily: use --temperature 0")
    run = TargetRunner(target, proposer.aux_layers)
    logits, aux = run(prompt_ids)
    first = int(logits[-1].argmax())
    result = DecodeResult([first])
    proposer.extend([*prompt_ids[1:], first], aux)
    last = first
    while len(result.tokens) < max_new_tokens and last not in stop_ids:
        prefix = run.cache.get_seq_length()
        tree = proposer.tree(depth, topk, num_draft_tokens)
        positions = torch.tensor([[prefix, *(prefix + n.depth for n in tree)]], device=run.device)
        vlogits, vaux = run(
            [last, *(n.token for n in tree)],
            attention_mask=_tree_mask(tree, prefix, run.device),
            position_ids=positions,
        )
        children: dict[int, dict[int, int]] = {}
        for i, n in enumerate(tree):
            children.setdefault(n.parent, {})[n.token] = i
        path, node = [], -1  # indices in `tree`; -1 = the root
        while True:
            want = int(vlogits[node + 1].argmax())
            nxt = children.get(node, {}).get(want)
            if nxt is None or (path and tree[path[-1]].token in stop_ids):
                break
            path.append(nxt)
            node = nxt
        new_tokens = [tree[i].token for i in path]
        if not new_tokens or new_tokens[-1] not in stop_ids:
            new_tokens.append(int(vlogits[node + 1].argmax()))
        new_tokens = cut_at_stop(new_tokens, max_new_tokens - len(result.tokens), stop_ids)
        accepted = min(len(path), len(new_tokens))
        result.tokens += new_tokens
        result.accepted.append(accepted)
        result.produced.append(len(new_tokens))
        # keep the verified context and the accepted path ([last, accepted nodes])
        rows = [0, *(1 + i for i in path[:accepted])]
        keep = torch.tensor(list(range(prefix)) + [prefix + r for r in rows], device=run.device)
        for layer in run.cache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)
        last = result.tokens[-1]
        proposer.extend(new_tokens, vaux[:, rows][:, : len(new_tokens)])
        # the target cache must end just before `last`: trim the bonus-less excess
        excess = run.cache.get_seq_length() - (len(prompt_ids) + len(result.tokens) - 1)
        if excess > 0:
            run.cache.crop(-excess)
    return result
