"""Lossless chain speculative decoding with the target and an EAGLE-3 drafter, on KV caches.

One round ("verify step"):
1. the drafter proposes K tokens: its first draft comes from the last *verified* position
   (target hidden state h_j and the token after it); drafts 2..K feed its own output hidden
   state forward, as in training (TTT);
2. the target scores [last verified token, d_1..d_K] in one forward;
3. acceptance rule -- temperature 0: accept d_i while it equals the target's argmax;
   temperature > 0: accept d_i with probability min(1, p(d_i) / q(d_i)), on rejection sample
   from norm(max(0, p - q)) (Leviathan et al.), which keeps the output distribution exactly
   the target's; if all K are accepted the target's next token is a bonus;
4. both caches are cropped to the verified length and the drafter is extended with the target
   hidden states of the newly verified tokens.

`acceptance_length` = tokens produced per target verify step, bonus included (SGLang's
definition; the prefill's first token is not a verify step and is not counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from eyas.drafter.model import Eagle3Drafter


def _cache_kwarg(model) -> str:
    """transformers >= 5.2x names the KV-cache argument `cache`; earlier 5.x `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _crop(cache, keep: int) -> None:
    """Keep the first `keep` positions (a negative count removes tokens in every 5.x)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


class DraftCache:
    """Per-layer K/V of the drafter for positions 0..L-1 (batch 1)."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None  # [1, h, L, d]
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def crop(self, length: int) -> None:
        if self.k is not None:
            self.k, self.v = self.k[:, :, :length], self.v[:, :, :length]


@torch.no_grad()
def draft_forward(
    model: Eagle3Drafter, input_ids: torch.Tensor, hidden: torch.Tensor, cache: DraftCache
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal incremental forward. input_ids: [1, T]; hidden: [1, T, H] (already fused or the
    drafter's own) -> logits [1, T, Dv], output hidden [1, T, H]."""
    layer = model.midlayer
    attn = layer.self_attn
    start = len(cache)
    t = input_ids.shape[1]
    positions = torch.arange(start, start + t, device=input_ids.device)
    x = torch.cat(
        [layer.input_layernorm(model.embed_tokens(input_ids)), layer.hidden_norm(hidden)], -1
    )
    q, k, v = attn.project(x, positions)
    cache.k = k if cache.k is None else torch.cat([cache.k, k], 2)
    cache.v = v if cache.v is None else torch.cat([cache.v, v], 2)
    total = cache.k.shape[2]
    mask = torch.ones(t, total, dtype=torch.bool, device=x.device).tril(total - t)
    out = F.scaled_dot_product_attention(q, cache.k, cache.v, attn_mask=mask)
    residual = layer.hidden_norm(hidden) if layer.norm_before_residual else hidden
    h = residual + attn.o_proj(out.transpose(1, 2).reshape(1, t, -1))
    h = h + layer.mlp(layer.post_attention_layernorm(h))
    return model.lm_head(model.norm(h)), h


@dataclass
class DecodeResult:
    tokens: list[int]
    accepted: list[int] = field(default_factory=list)  # accepted drafts per verify step
    produced: list[int] = field(default_factory=list)  # tokens produced per verify step
    first_token_from_prefill: bool = True


def _sample(probs: torch.Tensor, gen: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


@torch.no_grad()
def speculative_decode(
    target,
    drafter: Eagle3Drafter,
    prompt_ids: list[int],
    k: int,
    max_new_tokens: int,
    stop_ids: set[int],
    aux_layers: list[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    topk: int = 1,
    num_draft_tokens: int | None = None,
) -> DecodeResult:
    """Chain speculative decoding of one prompt; `target` is a HF causal LM. With `topk` > 1
    the drafts form a tree (see `tree_decode`)."""
    if topk > 1:
        from eyas.evaluate.tree import tree_decode

        return tree_decode(
            target,
            drafter,
            prompt_ids,
            k,
            topk,
            num_draft_tokens or k,
            max_new_tokens,
            stop_ids,
            aux_layers,
            temperature,
            generator,
        )
    from transformers import DynamicCache

    device = next(drafter.parameters()).device
    d2t = drafter.draft_to_target()
    vocab = target.get_output_embeddings().weight.shape[0]

    def tprobs(logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() / temperature, -1)

    cache_arg = _cache_kwarg(target)

    def target_forward(ids: list[int], cache):
        out = target(
            input_ids=torch.tensor([ids], device=device),
            use_cache=True,
            output_hidden_states=True,
            **{cache_arg: cache},
        )
        aux = torch.cat([out.hidden_states[i] for i in aux_layers], -1)
        return out.logits[0], aux

    tcache = DynamicCache()
    logits, aux = target_forward(prompt_ids, tcache)
    first = int(logits[-1].argmax()) if temperature == 0 else _sample(tprobs(logits[-1]), generator)
    result = DecodeResult([first])
    dcache = DraftCache()
    # Drafter context: position j pairs h_j with token x_{j+1}.
    next_tokens = [*prompt_ids[1:], first]
    dlogits, dhidden = draft_forward(
        drafter, torch.tensor([next_tokens], device=device), drafter.fc(aux.float()), dcache
    )
    last_token = first
    while len(result.tokens) < max_new_tokens and last_token not in stop_ids:
        verified_len = len(dcache)
        drafts, qs = [], []
        cur_logits, cur_hidden = dlogits[:, -1:], dhidden[:, -1:]
        for i in range(k):
            if temperature == 0:
                d = int(d2t[cur_logits[0, -1].argmax()])
            else:
                q = torch.zeros(vocab, device=device)
                q[d2t] = torch.softmax(cur_logits[0, -1].float() / temperature, -1)
                qs.append(q)
                d = _sample(q, generator)
            drafts.append(d)
            if i + 1 < k:
                cur_logits, cur_hidden = draft_forward(
                    drafter, torch.tensor([[d]], device=device), cur_hidden, dcache
                )
        vlogits, vaux = target_forward([last_token, *drafts], tcache)
        accepted, new_tokens = 0, []
        for i, d in enumerate(drafts):
            if temperature == 0:
                ok = int(vlogits[i].argmax()) == d
            else:
                p = tprobs(vlogits[i])
                ok = float(torch.rand((), generator=generator)) < min(1.0, float(p[d] / qs[i][d]))
            if not ok:
                break
            accepted += 1
            new_tokens.append(d)
            if d in stop_ids:
                break
        if not new_tokens or new_tokens[-1] not in stop_ids:
            row = vlogits[accepted]
            if temperature == 0:
                bonus = int(row.argmax())
            elif accepted < k:  # resample from the residual distribution
                residual = torch.clamp(tprobs(row) - qs[accepted], min=0)
                bonus = _sample(residual / residual.sum(), generator)
            else:
                bonus = _sample(tprobs(row), generator)
            new_tokens.append(bonus)
        room = max_new_tokens - len(result.tokens)
        new_tokens = new_tokens[:room]
        for j, tok in enumerate(new_tokens):
            if tok in stop_ids:
                new_tokens = new_tokens[: j + 1]
                break
        result.tokens += new_tokens
        result.accepted.append(accepted)
        result.produced.append(len(new_tokens))
        # Keep the verified prefix in both caches: the target saw last_token + drafts.
        _crop(tcache, len(prompt_ids) + len(result.tokens) - 1)
        dcache.crop(verified_len)
        last_token = result.tokens[-1]
        # Extend the drafter with the target hidden states of the newly verified positions.
        n = len(new_tokens)
        dlogits, dhidden = draft_forward(
            drafter,
            torch.tensor([new_tokens], device=device),
            drafter.fc(vaux[:, :n].float()),
            dcache,
        )
    return result


@torch.no_grad()
def greedy_reference(
    target, prompt_ids: list[int], max_new_tokens: int, stop_ids: set[int]
) -> list[int]:
    """Target-only greedy decoding (the losslessness reference at temperature 0)."""
    from transformers import DynamicCache

    device = target.device
    cache = DynamicCache()
    arg = _cache_kwarg(target)
    out = target(
        input_ids=torch.tensor([prompt_ids], device=device), use_cache=True, **{arg: cache}
    )
    tokens = []
    while True:
        tok = int(out.logits[0, -1].argmax())
        tokens.append(tok)
        if tok in stop_ids or len(tokens) >= max_new_tokens:
            return tokens
        out = target(input_ids=torch.tensor([[tok]], device=device), use_cache=True, **{arg: cache})
