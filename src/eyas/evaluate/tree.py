"""Tree drafts, as SGLang's EAGLE builds them (`--speculative-eagle-topk N
--speculative-num-draft-tokens M --speculative-num-steps K`), verified greedily and losslessly.

One round:
1. expansion: the drafter proposes its top-N tokens after the last verified token (depth 1);
   at each further depth every frontier node is expanded by its own top-N, and the N best of
   the N*N candidates by cumulative log-probability form the next frontier (K depths);
2. selection: the M best nodes by cumulative log-probability (ancestor-closed, since scores
   only fall along a path) form the draft tree;
3. verification: the target scores [last token, tree] in one forward with a tree attention
   mask (a node sees the verified context, the last token, its ancestors and itself, at
   position = its depth);
4. acceptance (temperature 0): from the root, follow the child whose token is the target's
   argmax while one exists; the target's argmax after the last accepted node is the bonus.
   The output is exactly the target's greedy decoding;
5. the target cache keeps the accepted path only; the drafter is extended with the target
   hidden states of the newly verified tokens, as in the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from eyas.drafter.model import Eagle3Drafter
from eyas.errors import EyasError
from eyas.evaluate.speculative import DecodeResult, DraftCache, _cache_kwarg, draft_forward


@dataclass
class _Node:
    token: int
    score: float  # cumulative log-probability under the drafter
    parent: int  # index in the node list; -1 = the root (last verified token)
    depth: int
    hidden: torch.Tensor | None = None  # the drafter's output hidden state here [1, 1, H]
    logprobs: torch.Tensor | None = None  # the drafter's next-token log-probs here [Dv]


def _ancestors(nodes: list[_Node], i: int) -> list[int]:
    path = []
    while i >= 0:
        path.append(i)
        i = nodes[i].parent
    return path[::-1]


@torch.no_grad()
def _draft_level(
    drafter: Eagle3Drafter,
    nodes: list[_Node],
    frontier: list[int],
    dcache: DraftCache,
    tree_kv: dict[int, tuple[torch.Tensor, torch.Tensor]],
    base: int,
) -> None:
    """One drafter forward over the frontier nodes: each attends to the verified context and
    its own path in the tree; fills their `hidden` and `logprobs`."""
    layer = drafter.midlayer
    attn = layer.self_attn
    device = drafter.d2t.device
    ids = torch.tensor([[nodes[i].token for i in frontier]], device=device)
    parents = [nodes[i].parent for i in frontier]
    hidden = torch.cat([nodes[p].hidden if p >= 0 else nodes[-1].hidden for p in parents], 1)
    positions = torch.tensor([base + nodes[i].depth - 1 for i in frontier], device=device)
    x = torch.cat([layer.input_layernorm(drafter.embed_tokens(ids)), layer.hidden_norm(hidden)], -1)
    q, k, v = attn.project(x, positions)  # [1, h, n, d]
    for col, i in enumerate(frontier):
        tree_kv[i] = (k[:, :, col : col + 1], v[:, :, col : col + 1])
    outs = []
    for col, i in enumerate(frontier):
        path = _ancestors(nodes, i)
        keys = torch.cat([dcache.k, *(tree_kv[a][0] for a in path)], 2)
        values = torch.cat([dcache.v, *(tree_kv[a][1] for a in path)], 2)
        outs.append(F.scaled_dot_product_attention(q[:, :, col : col + 1], keys, values))
    out = torch.cat(outs, 2)
    residual = layer.hidden_norm(hidden) if layer.norm_before_residual else hidden
    h = residual + attn.o_proj(out.transpose(1, 2).reshape(1, len(frontier), -1))
    h = h + layer.mlp(layer.post_attention_layernorm(h))
    logprobs = torch.log_softmax(drafter.lm_head(drafter.norm(h)).float(), -1)
    for col, i in enumerate(frontier):
        nodes[i].hidden = h[:, col : col + 1]
        nodes[i].logprobs = logprobs[0, col]


def _build_tree(
    drafter: Eagle3Drafter,
    root_logprobs: torch.Tensor,
    root_hidden: torch.Tensor,
    dcache: DraftCache,
    depth: int,
    topk: int,
    num_nodes: int,
    base: int,
) -> list[_Node]:
    d2t = drafter.draft_to_target()
    root = _Node(-1, 0.0, -1, 0, root_hidden, root_logprobs)
    nodes: list[_Node] = []
    tree_kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    best = torch.topk(root_logprobs, topk)
    frontier = []
    for lp, tok in zip(best.values.tolist(), best.indices.tolist()):
        nodes.append(_Node(int(d2t[tok]), lp, -1, 1))
        frontier.append(len(nodes) - 1)
    nodes.append(root)  # kept last so parent -1 can read the root's hidden state
    for level in range(2, depth + 1):
        _draft_level(drafter, nodes, frontier, dcache, tree_kv, base)
        candidates = []
        for i in frontier:
            child = torch.topk(nodes[i].logprobs, topk)
            for lp, tok in zip(child.values.tolist(), child.indices.tolist()):
                candidates.append((nodes[i].score + lp, int(d2t[tok]), i))
        candidates.sort(key=lambda c: -c[0])
        frontier = []
        for score, tok, parent in candidates[:topk]:
            nodes.insert(len(nodes) - 1, _Node(tok, score, parent, level))
            frontier.append(len(nodes) - 2)
    nodes.pop()  # the root
    order = sorted(range(len(nodes)), key=lambda i: -nodes[i].score)[:num_nodes]
    keep = sorted(order, key=lambda i: (nodes[i].depth, i))
    remap = {old: new for new, old in enumerate(keep)}
    remap[-1] = -1
    # scores never rise along a path and ties keep parents first: the selection holds every
    # selected node's parent
    return [
        _Node(nodes[old].token, nodes[old].score, remap[nodes[old].parent], nodes[old].depth)
        for old in keep
    ]


def _tree_mask(tree: list[_Node], prefix: int, device) -> torch.Tensor:
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
    drafter: Eagle3Drafter,
    prompt_ids: list[int],
    depth: int,
    topk: int,
    num_draft_tokens: int,
    max_new_tokens: int,
    stop_ids: set[int],
    aux_layers: list[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> DecodeResult:
    """Tree speculative decoding of one prompt (greedy); `target` is a HF causal LM."""
    from transformers import DynamicCache

    if temperature != 0:
        raise EyasError("bad_flag", "tree drafts are evaluated greedily: use --temperature 0")
    device = drafter.d2t.device
    cache_arg = _cache_kwarg(target)
    tcache = DynamicCache()
    out = target(
        input_ids=torch.tensor([prompt_ids], device=device),
        use_cache=True,
        output_hidden_states=True,
        **{cache_arg: tcache},
    )
    first = int(out.logits[0, -1].argmax())
    result = DecodeResult([first])
    aux = torch.cat([out.hidden_states[i] for i in aux_layers], -1)
    dcache = DraftCache()
    dlogits, dhidden = draft_forward(
        drafter,
        torch.tensor([[*prompt_ids[1:], first]], device=device),
        drafter.fc(aux.float()),
        dcache,
    )
    last = first
    while len(result.tokens) < max_new_tokens and last not in stop_ids:
        verified = len(dcache)
        prefix = tcache.get_seq_length()
        tree = _build_tree(
            drafter,
            torch.log_softmax(dlogits[0, -1].float(), -1),
            dhidden[:, -1:],
            dcache,
            depth,
            topk,
            num_draft_tokens,
            verified,
        )
        ids = torch.tensor([[last, *(n.token for n in tree)]], device=device)
        positions = torch.tensor([[prefix, *(prefix + n.depth for n in tree)]], device=device)
        vout = target(
            input_ids=ids,
            attention_mask=_tree_mask(tree, prefix, device),
            position_ids=positions,
            use_cache=True,
            output_hidden_states=True,
            **{cache_arg: tcache},
        )
        logits = vout.logits[0]  # [1 + M, V]
        children: dict[int, dict[int, int]] = {}
        for i, n in enumerate(tree):
            children.setdefault(n.parent, {})[n.token] = i
        path, node = [], -1  # indices in `tree`; -1 = the root
        while True:
            want = int(logits[node + 1].argmax())
            nxt = children.get(node, {}).get(want)
            if nxt is None or (path and tree[path[-1]].token in stop_ids):
                break
            path.append(nxt)
            node = nxt
        new_tokens = [tree[i].token for i in path]
        if not new_tokens or new_tokens[-1] not in stop_ids:
            new_tokens.append(int(logits[node + 1].argmax()))
        room = max_new_tokens - len(result.tokens)
        new_tokens = new_tokens[:room]
        for j, tok in enumerate(new_tokens):
            if tok in stop_ids:
                new_tokens = new_tokens[: j + 1]
                break
        accepted = min(len(path), len(new_tokens))
        result.tokens += new_tokens
        result.accepted.append(accepted)
        result.produced.append(len(new_tokens))
        # keep the verified context and the accepted path ([last, accepted nodes])
        rows = [0, *(1 + i for i in path[:accepted])]
        keep = torch.tensor(list(range(prefix)) + [prefix + r for r in rows], device=device)
        for layer in tcache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)
        vaux = torch.cat([vout.hidden_states[i] for i in aux_layers], -1)[:, rows]
        last = result.tokens[-1]
        n = len(new_tokens)
        dcache.crop(verified)
        dlogits, dhidden = draft_forward(
            drafter,
            torch.tensor([new_tokens], device=device),
            drafter.fc(vaux[:, :n].float()),
            dcache,
        )
        # the target cache must end just before `last`: trim the bonus-less excess
        excess = tcache.get_seq_length() - (len(prompt_ids) + len(result.tokens) - 1)
        if excess > 0:
            tcache.crop(-excess)
    return result
