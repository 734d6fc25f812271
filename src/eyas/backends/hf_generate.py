"""Batched greedy/sampled generation with an in-process transformers model.

Used by the `local` backend and the toy world's quality check. Prompts are left-padded so a
batch decodes in lockstep; outputs are cut after the first stop token, which is kept, as
SGLang keeps the matched stop token in `output_ids`.
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
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        attn[row, width - len(p) :] = 1
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
    results = []
    stops = set(stop_ids)
    for row in out[:, width:].tolist():
        cut = next((i for i, t in enumerate(row) if t in stops), None)
        if cut is None:
            results.append(LocalOutput(row[:max_new_tokens], "length", None))
        else:
            results.append(LocalOutput(row[: cut + 1], "stop", row[cut]))
    return results
