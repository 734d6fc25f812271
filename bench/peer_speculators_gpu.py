"""Peer half of bench_train_gpu: one speculators 0.9.0 `Eagle3DraftModel` case, timed, in its
own process. Never imports eyas (on the GPU machine it runs in the image's python with the
carried wheels; on CPU, for the `--tiny` rehearsal, in the speculators venv).

The draft model is built as speculators' trainer builds it (`create_transformer_layer_config`,
`from_training_args`: the verifier's embedding and its head rows of the draft ids loaded from
the verifier's safetensors, norm_before_residual, the draft vocabulary eyas's chooser picked,
given as speculators' offset table), its attention `simple_flex_attention` on CUDA (its default;
`sdpa` on CPU, where FlexAttention has no backward), its KL loss eager (its fused Triton loss
raised a dynamo error under torch 2.11 on 2026-12-04), bf16 autocast, AdamW (fp32), one random
sequence: warm-up steps (its `torch.compile` runs there), then timed steps. Its draft head is
frozen, as it ships; `--train-head` trains it (eyas's default).

    PY bench/peer_speculators_gpu.py --verifier DIR --vocab maps.safetensors --tokens T \
        [--train-head] [--warmup 2] [--steps 3]

Prints `RESULT {json}`: step seconds, tokens/s, peak and static memory, losses, trainable
parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--verifier", required=True)
    ap.add_argument("--vocab", required=True, help="safetensors with eyas's t2d and d2t")
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--decay", type=float, default=0.8)
    ap.add_argument("--train-head", action="store_true")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--loss", default=os.environ.get("SPEC_LOSS", "eager"))
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out: dict = {"side": "speculators", "tokens": args.tokens, "train_head": args.train_head}
    try:
        out.update(run(args, dev))
    except torch.OutOfMemoryError as exc:
        out["oom"] = str(exc).splitlines()[0][:200]
    except Exception as exc:  # recorded; the next case still runs
        import traceback

        traceback.print_exc()
        out["error"] = f"{type(exc).__name__}: {exc}"[:400]
    print("RESULT " + json.dumps(out), flush=True)


def run(args, dev: str) -> dict:
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.train.cli import create_transformer_layer_config

    cfg = json.loads((Path(args.verifier) / "config.json").read_text())
    maps = load_file(args.vocab)
    attn = "simple_flex_attention" if dev == "cuda" else "sdpa"
    layer_cfg = create_transformer_layer_config(
        verifier_name_or_path=args.verifier,
        num_layers=1,
        draft_arch="llama",
        hidden_act=None,
        sliding_window=0,
        full_attention_indices=[0],
    )
    n = cfg["num_hidden_layers"]
    model = Eagle3DraftModel.from_training_args(
        verifier_config=layer_cfg,
        t2d=maps["t2d"],
        d2t=maps["d2t"],
        draft_vocab_size=int(maps["t2d"].sum()),
        norm_before_residual=True,
        ttt_steps=args.ttt,
        target_layer_ids=[2, n // 2, n - 3],
        verifier_name_or_path=args.verifier,
        draft_attn_impl=attn,
    )
    train_kwargs, _ = Eagle3DraftModel.get_trainer_kwargs(
        loss_fn="kl_div",
        loss_implementation=args.loss,
        ttt_steps=args.ttt,
        ttt_step_loss_decay=args.decay,
    )
    if args.train_head:
        model.lm_head.weight.requires_grad_(True)
    model.to(dev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95))
    t, h = args.tokens, cfg["hidden_size"]
    g = torch.Generator().manual_seed(1)
    batch = {
        "input_ids": torch.randint(0, cfg["vocab_size"], (1, t), generator=g).to(dev),
        "hidden_states": torch.randn(1, t, 3 * h, generator=g).to(dev, torch.bfloat16),
        "verifier_last_hidden_states": torch.randn(1, t, h, generator=g).to(dev, torch.bfloat16),
        "document_ids": torch.zeros(1, t, dtype=torch.long, device=dev),
        "loss_mask": torch.ones(1, t, dtype=torch.bool, device=dev),
        "position_ids": torch.arange(t, device=dev).unsqueeze(0),
    }
    losses, times, static = [], [], 0
    for i in range(args.warmup + args.steps):
        if dev == "cuda":
            torch.cuda.synchronize()
            if i == args.warmup:
                static = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16):
            _, loss, _ = model(**batch, **train_kwargs)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(round(float(loss.detach()), 4))
        # progress on stderr: a case the driver stops at its timeout shows how far it came
        print(f"step {i}: {times[-1]:.2f} s", file=sys.stderr, flush=True)
    step_s = sum(times[args.warmup :]) / args.steps
    return {
        "attention": attn,
        "loss_implementation": args.loss,
        "trainable_parameters": sum(p.numel() for p in params),
        "step_seconds": [round(x, 4) for x in times],
        "step_s": round(step_s, 4),
        "tokens_per_s": round(t / step_s, 1),
        "losses": losses,
        "static_gb": round(static / 1e9, 3) if dev == "cuda" else None,
        "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3) if dev == "cuda" else None,
    }


if __name__ == "__main__":
    main()
