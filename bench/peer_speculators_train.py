"""Peer half of bench_train and bench_real: speculators 0.9.0 `Eagle3DraftModel` trained on
the batches they exported, on CPU (sdpa attention, eager KL loss; speculators on CPU), at
eyas's learning rate of every step when the batches carry it (`lr_factors`).

Runs in the speculators venv (tools/speculators_env.sh), not in eyas's: speculators pins
transformers <= 5.19. Called by bench_train.py, bench_real.py and bench_real_quality.py;
prints one JSON object.

    SPEC_VENV/bin/python bench/peer_speculators_train.py --data steps.safetensors \
        --meta steps.json --verifier TOY_DIR --ttt 3 [--resume STATE] [--state-out STATE]

A learning curve trains in segments: `--state-out` writes the drafter's weights and AdamW's
state (safetensors: `model.<param>`, `opt.<param>.<exp_avg|exp_avg_sq|step>`) after the
segment, and the next segment starts from them with `--resume`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def save_state(model, opt, path: str) -> None:
    """The weights and AdamW's state of every trained parameter, by parameter name."""
    out = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        out[f"model.{name}"] = p.detach().contiguous()
        for key, value in opt.state.get(p, {}).items():
            out[f"opt.{name}.{key}"] = torch.as_tensor(value).detach().contiguous()
    save_file(out, path)


def load_state(model, opt, path: str) -> None:
    state = load_file(path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            p.copy_(state[f"model.{name}"])
            keys = {k.rsplit(".", 1)[1] for k in state if k.startswith(f"opt.{name}.")}
            if keys:
                opt.state[p] = {k: state[f"opt.{name}.{k}"].clone() for k in keys}


def step_batch(tensors: dict, meta: dict, s: int) -> dict:
    """Step `s`'s packed row: stored per step, or (`meta["batches"]`) as a list of stored
    sequences packed here with document ids, outside the timed step."""
    if "batches" not in meta:
        return {k: tensors[f"{s}.{k}"].unsqueeze(0) for k in meta["keys"]}
    seqs = meta["batches"][s]
    batch = {k: torch.cat([tensors[f"{i}.{k}"] for i in seqs]) for k in meta["keys"]}
    batch["document_ids"] = torch.cat(
        [torch.full((len(tensors[f"{i}.input_ids"]),), r) for r, i in enumerate(seqs)]
    )
    return {k: v.unsqueeze(0) for k, v in batch.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--verifier", required=True)
    ap.add_argument("--ttt", type=int, required=True)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--save", default=None, help="save_pretrained the trained drafter here")
    ap.add_argument("--resume", default=None, help="start from a --state-out file")
    ap.add_argument("--state-out", default=None, help="write weights + AdamW state here")
    args = ap.parse_args()

    from peer_speculators_model import eagle3_peer

    torch.manual_seed(0)
    meta = json.loads(Path(args.meta).read_text())
    torch.set_num_threads(int(meta["threads"]))
    tensors = load_file(args.data)
    model, train_kwargs = eagle3_peer(
        args.verifier,
        tensors["t2d"],
        tensors["d2t"],
        meta["draft_vocab_size"],
        args.ttt,
        meta["aux_layers"],
        meta["loss_decay"],
    )
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=meta["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    if args.resume:
        load_state(model, opt, args.resume)
    model.train()
    factors = meta.get("lr_factors")  # eyas's warmup + cosine, step by step (else constant)
    times, losses = [], []
    for s in range(meta["steps"]):
        batch = step_batch(tensors, meta, s)
        if factors is not None:
            for group in opt.param_groups:
                group["lr"] = meta["lr"] * factors[s]
        t0 = time.perf_counter()
        _, loss, _ = model(
            hidden_states=batch["hidden_states"],
            input_ids=batch["input_ids"],
            document_ids=batch["document_ids"],
            loss_mask=batch["loss_mask"].bool(),
            position_ids=batch["position_ids"],
            verifier_last_hidden_states=batch["verifier_last_hidden_states"],
            **train_kwargs,
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, meta["clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    timed = times[args.warmup :]
    if args.save:  # speculators' own layout, which vLLM serves as an EAGLE-3 drafter
        model.save_pretrained(args.save)
    if args.state_out:
        save_state(model, opt, args.state_out)
    print(
        json.dumps(
            {
                "step_seconds": times,
                "timed_seconds": sum(timed),
                "timed_steps": len(timed),
                "losses": losses,
                "trainable_parameters": sum(p.numel() for p in params),
            }
        )
    )


if __name__ == "__main__":
    main()
