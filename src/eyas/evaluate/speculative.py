"""Lossless chain speculative decoding: the target verifies what a drafter method proposes.

The drafter side is the method's `Proposer` (`eyas.drafter`: EAGLE-3 drafts one token at a
time from its own state, DFlash drafts a block in one pass); this module is the target side,
the same for every method. One round ("verify step"):
1. the proposer drafts K tokens after the last *verified* position;
2. the target scores [last verified token, d_1..d_K] in one forward, on its KV cache;
3. acceptance rule -- temperature 0: accept d_i while it equals the target's argmax;
   temperature > 0: accept d_i with probability min(1, p(d_i) / q(d_i)), on rejection sample
   from norm(max(0, p - q)) (Leviathan et al.), which keeps the output distribution exactly
   the target's; if all K are accepted the target's next token is a bonus;
4. the target cache is cropped to the verified length and the proposer is extended with the
   target hidden states of the newly verified tokens.

`acceptance_length` = tokens produced per target verify step, bonus included (SGLang's
definition; the prefill's first token is not a verify step and is not counted).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from eyas.drafter.method import Proposer


def cache_kwarg(model) -> str:
    """transformers >= 5.2x names the KV-cache argument `cache`; earlier 5.x `past_key_values`."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def crop_cache(cache, keep: int) -> None:
    """Keep the first `keep` positions (a negative count removes tokens in every 5.x)."""
    extra = cache.get_seq_length() - keep
    if extra > 0:
        cache.crop(-extra)


@dataclass
class DecodeResult:
    tokens: list[int]
    accepted: list[int] = field(default_factory=list)  # accepted drafts per verify step
    produced: list[int] = field(default_factory=list)  # tokens produced per verify step
    first_token_from_prefill: bool = True


def _sample(probs: torch.Tensor, gen: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=gen))


def cut_at_stop(new_tokens: list[int], room: int, stop_ids: set[int]) -> list[int]:
    """The round's tokens that fit in `room` and end at the first stop token."""
    new_tokens = new_tokens[:room]
    for j, tok in enumerate(new_tokens):
        if tok in stop_ids:
            return new_tokens[: j + 1]
    return new_tokens


class TargetRunner:
    """The target on a KV cache: forwards return logits and the fused aux states."""

    def __init__(self, target, aux_layers: list[int]):
        from transformers import DynamicCache

        self.target = target
        self.aux_layers = list(aux_layers)
        self.cache = DynamicCache()
        self.arg = cache_kwarg(target)
        self.device = target.get_output_embeddings().weight.device

    def __call__(self, ids: list[int], **kwargs):
        out = self.target(
            input_ids=torch.tensor([ids], device=self.device),
            use_cache=True,
            output_hidden_states=True,
            **{self.arg: self.cache},
            **kwargs,
        )
        aux = torch.cat([out.hidden_states[i] for i in self.aux_layers], -1)
        return out.logits[0], aux


@torch.no_grad()
def speculative_decode(
    target,
    proposer: Proposer,
    prompt_ids: list[int],
    *,
    k: int,
    max_new_tokens: int,
    stop_ids: set[int],
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> DecodeResult:
    """Chain speculative decoding of one prompt; `target` is a HF causal LM, `proposer` a
    method's (`method.proposer(drafter)`)."""
    run = TargetRunner(target, proposer.aux_layers)
    vocab = target.get_output_embeddings().weight.shape[0]

    def tprobs(logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() / temperature, -1)

    logits, aux = run(prompt_ids)
    first = int(logits[-1].argmax()) if temperature == 0 else _sample(tprobs(logits[-1]), generator)
    result = DecodeResult([first])
    # position j pairs the target's h_j with the token x_{j+1} after it
    proposer.extend([*prompt_ids[1:], first], aux)
    last_token = first
    while len(result.tokens) < max_new_tokens and last_token not in stop_ids:
        drafts, qs = proposer.propose(k, temperature, generator)
        vlogits, vaux = run([last_token, *drafts])
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
            elif accepted < len(drafts):  # resample from the residual distribution
                residual = torch.clamp(tprobs(row) - qs[accepted][:vocab], min=0)
                bonus = _sample(residual / residual.sum(), generator)
            else:
                bonus = _sample(tprobs(row), generator)
            new_tokens.append(bonus)
        new_tokens = cut_at_stop(new_tokens, max_new_tokens - len(result.tokens), stop_ids)
        result.tokens += new_tokens
        result.accepted.append(accepted)
        result.produced.append(len(new_tokens))
        # Keep the verified prefix: the target saw last_token + drafts.
        crop_cache(run.cache, len(prompt_ids) + len(result.tokens) - 1)
        last_token = result.tokens[-1]
        # Extend the drafter with the target hidden states of the newly verified positions.
        proposer.extend(new_tokens, vaux[:, : len(new_tokens)])
    return result


@torch.no_grad()
def greedy_reference(
    target, prompt_ids: list[int], max_new_tokens: int, stop_ids: set[int]
) -> list[int]:
    """Target-only greedy decoding (the losslessness reference at temperature 0)."""
    from transformers import DynamicCache

    device = target.device
    cache = DynamicCache()
    arg = cache_kwarg(target)
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
