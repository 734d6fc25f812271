"""Batched greedy/sampled generation with an in-process transformers model.

Used by the `local` backend and the toy world's quality check. Prompts are left-padded so a
batch decodes in lockstep; outputs are cut after the first stop token, which is kept, as
SGLang keeps the matched stop token in `output_ids`.

Greedy decoding runs eyas's own loop over the model's forward (the steps transformers'
`generate` takes for a left-padded batch: positions from the attention mask, a dynamic KV
cache, logits of the last position only, argmax), with one difference: a row that has emitted
its stop token leaves the batch, and so does its KV cache. transformers keeps decoding every
finished row until the longest one ends, so on chat data, where one answer in a batch often
runs many times longer than the rest, most of its decode work is for rows already done
(bench/bench_local_generate.py). Models whose generation config adds a logits processor to
greedy decoding (a repetition penalty, forced or suppressed tokens, ...), caches that are not
plain per-layer key/value tensors, and sampling go through `generate` itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LocalOutput:
    output_ids: list[int]
    finish_reason: str  # stop | length
    matched_stop: int | None


def generate_batch(
    model,
    prompts: list[list[int]],
    stop_ids: list[int],
    max_new_tokens: int,
    pad_id: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int | None = None,
) -> list[LocalOutput]:
    if temperature == 0 and _plain_greedy(model):
        rows = _greedy_shrinking(model, prompts, stop_ids, max_new_tokens, pad_id)
        if rows is not None:
            return [_cut(row, set(stop_ids), max_new_tokens) for row in rows]
    return _transformers_generate(
        model, prompts, stop_ids, max_new_tokens, pad_id, temperature, top_p, seed
    )


def _left_padded(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[row, width - len(p) :] = 1
    return ids, attn


def _cut(row: list[int], stops: set[int], max_new_tokens: int) -> LocalOutput:
    cut = next((i for i, t in enumerate(row) if t in stops), None)
    if cut is None:
        return LocalOutput(row[:max_new_tokens], "length", None)
    return LocalOutput(row[: cut + 1], "stop", row[cut])


# generation-config fields that make transformers' greedy decoding more than an argmax
_GREEDY_PROCESSORS = (
    "repetition_penalty",
    "encoder_repetition_penalty",
    "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size",
    "bad_words_ids",
    "sequence_bias",
    "suppress_tokens",
    "begin_suppress_tokens",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "forced_decoder_ids",
    "min_length",
    "min_new_tokens",
    "exponential_decay_length_penalty",
    "logits_processor",
    "watermarking_config",
)


def _plain_greedy(model) -> bool:
    cfg = getattr(model, "generation_config", None)
    if cfg is None or getattr(model.config, "is_encoder_decoder", False):
        return False
    return all(_inactive(name, getattr(cfg, name, None)) for name in _GREEDY_PROCESSORS)


def _inactive(name: str, value) -> bool:
    if value is None or value is False or (isinstance(value, (list, dict)) and not value):
        return True
    if name.endswith("penalty") and value == 1.0:
        return True
    return isinstance(value, int) and value == 0 and not name.endswith("_id")


@torch.inference_mode()
def _greedy_shrinking(
    model, prompts: list[list[int]], stop_ids: list[int], max_new_tokens: int, pad_id: int
) -> list[list[int]] | None:
    """Each prompt's greedy continuation (up to and including its stop token), finished rows
    dropped from the batch as they end; None when the model's cache cannot drop rows."""
    import inspect

    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    # transformers >= 5.2x names the KV-cache argument `cache`; earlier 5.x `past_key_values`
    arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    device = model.device
    ids, attn = _left_padded(prompts, pad_id)
    ids, attn = ids.to(device), attn.to(device)
    # as transformers' generate: positions count real tokens, padding gets position 0
    pos = (attn.cumsum(-1) - 1).masked_fill(attn == 0, 0)
    cache = DynamicCache(config=model.config)
    out = model(
        input_ids=ids,
        attention_mask=attn,
        position_ids=pos,
        use_cache=True,
        logits_to_keep=1,
        **{arg: cache},
    )
    if any(type(layer) is not DynamicLayer for layer in cache.layers):
        return None  # sliding-window, linear-attention or offloaded layers: let generate decide
    stops = torch.tensor(sorted(set(stop_ids)), device=device)
    outputs: list[list[int]] = [[] for _ in prompts]
    live = list(range(len(prompts)))  # original row of each batch row
    last = pos[:, -1]
    nxt = out.logits[:, -1].argmax(-1)
    for step in range(1, max_new_tokens + 1):
        for row, tok in zip(live, nxt.tolist()):
            outputs[row].append(tok)
        if step == max_new_tokens:
            break
        going = ~torch.isin(nxt, stops)
        if not bool(going.any()):
            break
        if not bool(going.all()):
            keep = going.nonzero().squeeze(1)
            for layer in cache.layers:
                layer.batch_select_indices(keep)
            live = [live[i] for i in keep.tolist()]
            nxt, attn, last = nxt[keep], attn[keep], last[keep]
        attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], 1)
        last = last + 1
        out = model(
            input_ids=nxt[:, None],
            attention_mask=attn,
            position_ids=last[:, None],
            use_cache=True,
            **{arg: cache},
        )
        nxt = out.logits[:, -1].argmax(-1)
    return outputs


def _transformers_generate(
    model, prompts, stop_ids, max_new_tokens, pad_id, temperature, top_p, seed
) -> list[LocalOutput]:
    ids, attn = _left_padded(prompts, pad_id)
    width = ids.shape[1]
    kwargs = {"do_sample": False}
    if temperature > 0:
        kwargs = {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
        if seed is not None:
            torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.to(model.device),
            attention_mask=attn.to(model.device),
            max_new_tokens=max_new_tokens,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
            **kwargs,
        )
    stops = set(stop_ids)
    return [_cut(row, stops, max_new_tokens) for row in out[:, width:].tolist()]
