"""speculators 0.9.0's `PEagleDraftModel` trained on batches eyas wrote (`peagle_reference`): the
same initial weights, packed rows, COD samples, optimizer and learning rate of every step.

Runs in the speculators venv (tools/speculators_env.sh), never imports eyas:

    SPEC_VENV/bin/python speculators_peagle_peer.py WORKDIR

WORKDIR holds `spec.json`, `init.safetensors` (eyas's initial drafter in eyas's names, the
decoder layer `midlayer.` where speculators says `layers.0.`, plus the target's final norm as
`verifier_norm.weight`) and `steps.safetensors` (per step: the packed row as speculators'
collator and `shift_batch` lay it out, and `{s}.anchor_pos` / `{s}.depth`, the COD samples eyas
drew). speculators' own `generate_cod_sample_indices` is replaced by one returning those
samples (and run on its own, row by row from eyas's seeds, into `own_cod.safetensors`, to show
it draws the same); everything else is its code (`from_training_args`, sdpa attention over
its `create_peagle_mask_mod`, eager KL loss), with eyas's trainable set: the embedding frozen
(speculators' option), the head trained or frozen as eyas's `draft_head` says (frozen is
speculators' own). Writes each step's gradients (eyas's names) to `grads-{s}.safetensors` and
prints one JSON line: per step the loss and per-depth counts.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def _speculators_name(name: str) -> str:
    return "layers.0." + name[len("midlayer.") :] if name.startswith("midlayer.") else name


def _eyas_name(name: str) -> str:
    return "midlayer." + name[len("layers.0.") :] if name.startswith("layers.0.") else name


def build(spec: dict, init: dict):
    from speculators.models.peagle import core
    from speculators.models.peagle.core import PEagleDraftModel
    from transformers import LlamaConfig

    c = spec["config"]
    layer_cfg = LlamaConfig(
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=1,
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c["max_position_embeddings"],
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    model = PEagleDraftModel.from_training_args(  # its trainer's own path
        verifier_config=layer_cfg,
        verifier_name_or_path=spec["verifier"],
        draft_vocab_size=c["draft_vocab_size"],
        target_layer_ids=c["aux_layer_ids"],
        mask_token_id=c["mask_token_id"],
        num_depths=c["depths"],
        norm_before_residual=c["norm_before_residual"],
        draft_attn_impl="sdpa",
    )
    # eyas keeps the target's embedding frozen (speculators' `embed_requires_grad`, default True
    # for P-EAGLE, is its own option); a trained head (`draft_head`) is unfrozen here
    # (speculators freezes it: `DraftVocabMixin._load_verifier_weights`)
    model.config.embed_requires_grad = False
    weights = {_speculators_name(k): v for k, v in init.items() if k not in ("d2t", "t2d")}
    if c["draft_vocab_size"] != c["vocab_size"]:
        weights.update({k: init[k] for k in ("d2t", "t2d")})
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise SystemExit(f"weights do not map: missing {missing}, unexpected {unexpected}")
    for name in ("embed_tokens", "verifier_lm_head", "verifier_norm"):
        getattr(model, name).weight.requires_grad_(False)
    model.lm_head.weight.requires_grad_(c.get("draft_head", "trained") != "frozen")
    return model, core


def own_cod_samples(spec: dict, data: dict, s: int) -> dict[str, torch.Tensor]:
    """speculators' own `generate_cod_sample_indices`, row by row, its `torch.randperm` drawing
    from the generator eyas seeded for that row (the same calls in the same order as eyas's
    `cod_sample`): the packed anchors and depths of depths >= 1 it samples."""
    from speculators.models.peagle import data as cod

    t, cfg = int(spec["row_len"][s]), spec["cod"]
    mask = data[f"{s}.loss_mask"].view(-1, t)
    original, anchors, depths = torch.randperm, [], []
    try:
        for row, seed in enumerate(data[f"{s}.row_seeds"].tolist()):
            gen = torch.Generator().manual_seed(seed)
            torch.randperm = lambda n, device=None, _g=gen: original(n, generator=_g)
            a, d = cod.generate_cod_sample_indices(
                seq_length=t,
                loss_mask=mask[row][None],
                num_depths=spec["config"]["depths"],
                down_sample_ratio=cfg["ratio"],
                down_sample_ratio_min=cfg["ratio_min"],
                max_anchors=cfg["max_anchors"],
            )
            anchors.append(a[d > 0] + row * t)
            depths.append(d[d > 0])
    finally:
        torch.randperm = original
    return {f"{s}.anchor_pos": torch.cat(anchors), f"{s}.depth": torch.cat(depths)}


def main(work: Path) -> None:
    spec = json.loads((work / "spec.json").read_text())
    torch.set_num_threads(int(spec.get("threads", 1)))
    init = load_file(str(work / "init.safetensors"))
    init["verifier_lm_head.weight"] = init["lm_head.weight"]
    data = load_file(str(work / "steps.safetensors"))
    model, core = build(spec, init)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sorted(_eyas_name(n) for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(params, lr=spec["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    depths = spec["config"]["depths"]
    kwargs = type(model).get_trainer_kwargs(
        loss_fn="kl_div", loss_implementation="eager", num_depths=depths
    )[0]
    steps, own = [], {}
    for s in range(spec["steps"]):
        own.update(own_cod_samples(spec, data, s))
        sample = (data[f"{s}.anchor_pos"], data[f"{s}.depth"])
        core.generate_cod_sample_indices = lambda *_a, _x=sample, **_k: _x
        for group in opt.param_groups:
            group["lr"] = spec["lr"] * spec["lr_factors"][s]
        t0 = time.perf_counter()
        _, loss, metrics = model(
            hidden_states=data[f"{s}.hidden_states"][None],
            input_ids=data[f"{s}.input_ids"][None],
            loss_mask=data[f"{s}.loss_mask"][None],
            verifier_last_hidden_states=data[f"{s}.verifier_last_hidden_states"][None],
            document_ids=data[f"{s}.document_ids"][None],
            **kwargs,
        )
        loss.backward()
        grads = {
            _eyas_name(n): p.grad.detach().clone().contiguous()
            for n, p in model.named_parameters()
            if p.requires_grad
        }
        save_file(grads, str(work / f"grads-{s}.safetensors"))
        torch.nn.utils.clip_grad_norm_(params, spec["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append(
            {
                "seconds": time.perf_counter() - t0,
                "loss": float(loss.detach()),
                "correct": [int(metrics[f"position_{d}_acc_sum"]) for d in range(depths)],
                "total": [int(metrics[f"position_{d}_acc_total"]) for d in range(depths)],
            }
        )
    save_file(own, str(work / "own_cod.safetensors"))
    print("JSON" + json.dumps({"steps": steps, "trainable": trainable}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
