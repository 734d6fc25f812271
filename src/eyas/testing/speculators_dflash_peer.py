"""speculators 0.9.0's `DFlashDraftModel` or `DFlash2DraftModel` (`spec.json`'s `method`) trained
on batches eyas wrote (`dflash_reference`): the same initial weights, packed rows, anchors,
optimizer and learning rate of every step.

Runs in the speculators venv (tools/speculators_env.sh), never imports eyas:

    SPEC_VENV/bin/python speculators_dflash_peer.py WORKDIR

WORKDIR holds `spec.json`, `init.safetensors` (eyas's initial drafter, eyas's names, which are
speculators' too, plus the target's final norm as `verifier_norm.weight`) and
`steps.safetensors` (per step: the packed row as speculators' data collator lays it out, and
`{s}.anchors`, the packed anchor positions eyas drew). speculators' own `select_anchors` is
replaced by one returning those anchors: everything else is its code (sdpa attention, eager KL
loss, `fixed-exp-decay` weights; DFlash2's selector loss with alpha 1). Writes the first step's
gradients (`grads.speculators.safetensors`, before clipping). Prints one JSON line: per step the
loss and the correct counts (DFlash: per slot; DFlash2: the teacher-forced selector's total).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def build(spec: dict, init: dict):
    from speculators.models.dflash import core
    from speculators.models.dflash.core import DFlashDraftModel
    from speculators.models.dflash2 import DFlash2DraftModel, DFlash2SpeculatorConfig
    from transformers import Qwen3Config

    c = spec["config"]
    layer_cfg = Qwen3Config(
        vocab_size=c["vocab_size"],
        hidden_size=c["hidden_size"],
        intermediate_size=c["intermediate_size"],
        num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"],
        num_key_value_heads=c["num_key_value_heads"],
        head_dim=c["head_dim"],
        rms_norm_eps=c["rms_norm_eps"],
        max_position_embeddings=c["max_position_embeddings"],
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
        hidden_act="silu",
        attention_bias=False,
        tie_word_embeddings=False,
        layer_types=["full_attention"] * c["num_hidden_layers"],
    )
    kwargs = DFlashDraftModel._build_base_config_kwargs(  # its trainer's own config path
        spec["method"],
        layer_cfg,
        draft_vocab_size=c["vocab_size"],
        block_size=c["block_size"],
        target_layer_ids=c["aux_layer_ids"],
        mask_token_id=c["mask_token_id"],
        verifier_name_or_path=spec["verifier"],
        draft_attn_impl="sdpa",
    )
    if spec["method"] == "dflash2":  # `DFlash2DraftModel.from_training_args`
        keys = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
        config = DFlash2SpeculatorConfig(**kwargs, **{k: c[k] for k in keys})
        model = DFlash2DraftModel(config=config)
    else:
        model = DFlashDraftModel(config=core.DFlashSpeculatorConfig(**kwargs))
    model.load_vocab_mappings(None, None)
    missing, unexpected = model.load_state_dict(init, strict=False)
    missing = [k for k in missing if k not in ("t2d", "d2t")]
    if missing or unexpected:
        raise SystemExit(f"weights do not map: missing {missing}, unexpected {unexpected}")
    for name in ("embed_tokens", "lm_head", "verifier_lm_head", "verifier_norm"):
        getattr(model, name).weight.requires_grad_(False)
    return model, core


def main(work: Path) -> None:
    spec = json.loads((work / "spec.json").read_text())
    torch.set_num_threads(int(spec.get("threads", 1)))
    init = load_file(str(work / "init.safetensors"))
    init["verifier_lm_head.weight"] = init["lm_head.weight"]
    data = load_file(str(work / "steps.safetensors"))
    model, core = build(spec, init)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    opt = torch.optim.AdamW(params, lr=spec["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    kwargs = type(model).get_trainer_kwargs(
        loss_fn="kl_div",
        loss_implementation="eager",
        dflash_decay_gamma=spec["gamma"],
        selector_loss_alpha=spec.get("selector_loss_alpha", 1.0),
    )[0]
    bs = spec["config"]["block_size"]
    steps = []
    for s in range(spec["steps"]):
        anchors = data[f"{s}.anchors"]
        valid = torch.ones(len(anchors), dtype=torch.bool)
        core.select_anchors = lambda *_a, _x=anchors, _v=valid: (_x, _v)
        for group in opt.param_groups:
            group["lr"] = spec["lr"] * spec["lr_factors"][s]
        t0 = time.perf_counter()
        _, loss, metrics = model(
            hidden_states=data[f"{s}.hidden_states"][None],
            input_ids=data[f"{s}.input_ids"][None],
            loss_mask=data[f"{s}.loss_mask"][None].bool(),
            verifier_last_hidden_states=data[f"{s}.verifier_last_hidden_states"][None],
            document_ids=data[f"{s}.document_ids"][None],
            position_ids=data[f"{s}.position_ids"][None],
            **{**kwargs, "max_anchors": len(anchors)},
        )
        loss.backward()
        if s == 0:
            grads = {
                n: p.grad.contiguous() for n, p in model.named_parameters() if p.grad is not None
            }
            save_file(grads, str(work / "grads.speculators.safetensors"))
        torch.nn.utils.clip_grad_norm_(params, spec["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        steps.append(
            {
                "seconds": time.perf_counter() - t0,
                "loss": float(loss.detach()),
                "correct": [int(metrics["teacher_forced_selector_acc_sum"])]
                if spec["method"] == "dflash2"
                else [int(metrics[f"position_{i}_acc_sum"]) for i in range(1, bs)],
                "total": [int(metrics[f"position_{i}_acc_total"]) for i in range(1, bs)],
            }
        )
    print("JSON" + json.dumps({"steps": steps, "trainable": trainable}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
