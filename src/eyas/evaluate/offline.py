"""Offline evaluation: lossless speculative decoding with the target and the drafter here.

The drafter's method supplies the proposer (chain) or tree proposer; the target side is the
same for every method, so acceptance is counted the same way for EAGLE-3 and DFlash.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from itertools import chain
from typing import Any

import torch

from eyas.drafter.load import load_drafter
from eyas.drafter.registry import method_of
from eyas.errors import EyasError
from eyas.evaluate.categories import grouped
from eyas.evaluate.config import EvalConfig
from eyas.evaluate.metrics import acceptance_metrics
from eyas.evaluate.prompts import FollowUps, Rounds
from eyas.evaluate.speculative import DecodeResult, greedy_reference, speculative_decode
from eyas.hf_models import load_frozen_lm


def decode_one(
    target, drafter, prompt_ids: list[int], cfg: EvalConfig, stop: set[int], gen
) -> DecodeResult:
    """One prompt, chain or tree, through the drafter's method."""
    method = method_of(drafter)
    if cfg.topk > 1:
        from eyas.evaluate.tree import tree_decode

        proposer = method.tree_proposer(drafter)
        if proposer is None:
            raise EyasError("bad_flag", f"{method.name} drafts no trees: evaluate it with --topk 1")
        return tree_decode(
            target,
            proposer,
            prompt_ids,
            depth=cfg.k,
            topk=cfg.topk,
            num_draft_tokens=cfg.num_draft_tokens or cfg.k,
            max_new_tokens=cfg.max_new_tokens,
            stop_ids=stop,
            temperature=cfg.temperature,
        )
    return speculative_decode(
        target,
        method.proposer(drafter),
        prompt_ids,
        k=cfg.k,
        max_new_tokens=cfg.max_new_tokens,
        stop_ids=stop,
        temperature=cfg.temperature,
        generator=gen,
    )


def evaluate_offline(
    cfg: EvalConfig,
    prompts: list[dict],
    log: Callable[[str], None] = print,
    *,
    follow_ups: FollowUps | None = None,
) -> dict[str, Any]:
    """`prompts`, then each round `follow_ups` builds from the outputs (`Rounds`), with the
    target loaded once for all of them; the result adds every prompt's `outputs`."""
    from eyas.render.renderer import Renderer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = load_frozen_lm(cfg.target, device, torch.float32, cfg.trust_remote_code)
    drafter = load_drafter(cfg.drafter, device, target_dir=cfg.target)
    rule = drafter.config.extra.get("aux_layer_rule")
    log(
        f"drafter fuses target layers (HF index) {drafter.config.aux_layer_ids}"
        + (f": {rule}" if rule else "")
    )
    stop = set(Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code).stop_token_ids())
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    width = cfg.num_draft_tokens or cfg.k
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"accepted": [], "produced": []})
    mismatches: list[str] = []
    start = time.time()
    tokens = 0
    block = getattr(drafter.config, "block_size", None)
    if block is not None and cfg.k != block - 1:
        log(
            f"note: the drafter was trained on blocks of {block} ({block - 1} drafts); "
            f"evaluating blocks of {cfg.k + 1}"
        )
    rounds = Rounds(prompts, follow_ups)
    for p in chain.from_iterable(rounds):  # lazily: a round is built after the one before
        res = decode_one(target, drafter, p["prompt_ids"], cfg, stop, gen)
        tokens += len(res.tokens)
        rounds.outputs[p["id"]] = res.tokens
        per_ds[p["dataset"]]["accepted"] += res.accepted
        per_ds[p["dataset"]]["produced"] += res.produced
        if (
            cfg.temperature == 0
            and cfg.lossless_check
            and res.tokens != greedy_reference(target, p["prompt_ids"], cfg.max_new_tokens, stop)
        ):
            mismatches.append(p["id"])
    all_acc = [a for d in per_ds.values() for a in d["accepted"]]
    all_prod = [x for d in per_ds.values() for x in d["produced"]]
    return {
        **acceptance_metrics(all_acc, all_prod, width),
        "lossless": not mismatches if cfg.temperature == 0 and cfg.lossless_check else None,
        "lossless_mismatches": mismatches,
        "datasets": {
            name: {
                **acceptance_metrics(d["accepted"], d["produced"], width),
                "prompts": sum(1 for p in rounds.prompts if p["dataset"] == name),
            }
            for name, d in sorted(per_ds.items())
        },
        "categories": {
            cat: {
                **acceptance_metrics(
                    [a for n in names for a in per_ds[n]["accepted"]],
                    [x for n in names for x in per_ds[n]["produced"]],
                    width,
                ),
                "prompts": sum(1 for p in rounds.prompts if p["dataset"] in names),
                "datasets": names,
            }
            for cat, names in grouped(per_ds).items()
        },
        "seconds": round(time.time() - start, 2),
        "output_tokens": tokens,
        "outputs": rounds.outputs,
        "rounds": rounds.sizes,
        "method": drafter.config.method,
        "aux_layers_hf": list(drafter.config.aux_layer_ids),
        "aux_layer_rule": rule,
    }
