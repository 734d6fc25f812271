"""Drafter training throughput on CPU at toy scale, TTT 3 and 7 (supervised tokens/s), with
speculators 0.9.0 `Eagle3DraftModel` on the same batches in the same run.

    .venv/bin/python bench/bench_train.py [--steps 20] [--batch-tokens 4096] [--lr 1e-4] \
        [--warmup-steps 2] [--window 5] [--ttt 3,7] [--no-peer]

Four figures per TTT depth, all on the same sequences, batches and draft vocabulary:
- eyas online: `eyas train`'s full step, the frozen target's forward included.
- eyas captured: `eyas train --hidden-states` on an `eyas capture` of the same samples (bf16
  states read from disk, only embedding/norm/lm_head of the target loaded; goal: 2x online).
- eyas drafter step: the same Trainer step with the target outputs precomputed (what a
  peer that trains from stored hidden states does per step).
- speculators: `Eagle3DraftModel` (1 layer, sdpa attention, eager KL loss, decay 0.8) on
  the same batches, packed as speculators packs them, with the same AdamW, clipping and
  learning rate at every step (eyas's linear warmup then cosine decay, handed over as
  `lr_factors`); run in its own venv (tools/speculators_env.sh builds it; speculators pins
  transformers <= 5.19) by bench/peer_speculators_train.py.
ratio = speculators time / eyas drafter-step time for the same timed steps (> 1: eyas
faster). The first `--warmup` steps of each are not timed. The eyas drafter step runs before
and again after the peer (the machine may be shared): the ratio uses the mean of the two, and
the JSON keeps both.

A speed ratio means something only if both sides train: the JSON keeps every step's loss of
both, and the table prints each side's loss averaged over the first and the last `--window`
steps (the two losses are not on one scale: each normalizes its own way; each must fall).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from peers import ROOT, speculators_venv
from safetensors.torch import save_file

from eyas.capture.config import CaptureConfig
from eyas.capture.run import run_capture
from eyas.render.renderer import Renderer
from eyas.sources import convert_rows
from eyas.toy.build import build_toy
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer
from eyas.train.result import StepMetrics


def samples(model_dir: Path, path: Path) -> None:
    r = Renderer(model_dir)
    with path.open("w") as f:
        for fam in FAMILIES:
            for conv in convert_rows(family_rows(fam, 30, seed=5), fam.format, fam.name):
                if hasattr(conv, "messages"):
                    f.write(json.dumps(reference_sample(r, conv).to_dict()) + "\n")


class RecordingTrainer(Trainer):
    """Runs the target online and keeps its outputs per batch."""

    def __init__(self, cfg: TrainConfig, cache: dict):
        super().__init__(cfg, log=lambda s: None)
        self.cache = cache

    def _target_outputs(self, ids, seqs):
        out = super()._target_outputs(ids, seqs)
        self.cache[ids.numpy().tobytes()] = out
        return out


class PrecomputedTrainer(Trainer):
    """The same step on the recorded target outputs."""

    def __init__(self, cfg: TrainConfig, cache: dict):
        super().__init__(cfg, log=lambda s: None)
        self.cache = cache

    def _target_outputs(self, ids, seqs):
        return self.cache[ids.numpy().tobytes()]


def timed(history: list[StepMetrics], warmup: int) -> tuple[float, int]:
    """Seconds and supervised tokens of the steps after `warmup`."""
    start = history[warmup - 1].elapsed_s if warmup else 0.0
    return history[-1].elapsed_s - start, sum(m.trained_positions for m in history[warmup:])


def window_means(losses: list[float], window: int) -> list[float]:
    """Mean loss of the first and of the last `window` steps (one batch's loss is noisy)."""
    w = max(1, min(window, len(losses) // 2))
    return [round(sum(losses[:w]) / w, 4), round(sum(losses[-w:]) / w, 4)]


def arrow(pair: list[float] | None) -> str:
    return "-" if pair is None else f"{pair[0]:.2f} -> {pair[1]:.2f}"


def export_peer_batches(trainer: Trainer, steps: int, path: Path, meta_path: Path) -> None:
    """The batches of steps 0..steps-1 in speculators' layout: per sequence shifted as
    speculators' `shift_batch` does (x_{j+1}, g_j, y_{j+1}), packed into one row with
    document ids. The loss mask is eyas's (index j trains x_{j+2}) so both train the same
    positions."""
    target = trainer.target
    captured = {}
    hook = target.model.model.layers[-1].register_forward_hook(
        lambda m, i, o: captured.__setitem__("last", o[0] if isinstance(o, tuple) else o)
    )
    tensors: dict[str, torch.Tensor] = {
        "t2d": trainer.raw_model.t2d.clone(),
        "d2t": trainer.raw_model.d2t.clone(),
    }
    keys = [
        "input_ids",
        "hidden_states",
        "verifier_last_hidden_states",
        "loss_mask",
        "position_ids",
        "document_ids",
    ]
    for s in range(steps):
        seqs, _ = trainer._batch_at(s)
        width = max(len(q.ids) for q in seqs)
        ids = torch.zeros(len(seqs), width, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for r, q in enumerate(seqs):
            ids[r, : len(q.ids)] = torch.tensor(q.ids)
            attn[r, : len(q.ids)] = 1
        aux, _ = target(ids, seqs)
        last = captured["last"]
        parts: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
        for r, q in enumerate(seqs):
            n = len(q.ids)
            sup = torch.tensor([*q.supervised, 0])
            parts["input_ids"].append(ids[r, 1:n])
            parts["hidden_states"].append(aux[r, : n - 1])
            parts["verifier_last_hidden_states"].append(last[r, 1:n])
            parts["loss_mask"].append(sup[2 : n + 1].to(torch.uint8))
            parts["position_ids"].append(torch.arange(1, n))
            parts["document_ids"].append(torch.full((n - 1,), r, dtype=torch.long))
        for k in keys:
            tensors[f"{s}.{k}"] = torch.cat(parts[k]).contiguous()
    hook.remove()
    save_file(tensors, str(path))
    cfg = trainer.cfg
    meta_path.write_text(
        json.dumps(
            {
                "steps": steps,
                "keys": keys,
                "draft_vocab_size": int(trainer.raw_model.config.draft_vocab_size),
                "aux_layers": list(target.aux_layers),
                "loss_decay": cfg.loss_decay,
                "lr": cfg.lr,
                "lr_factors": [trainer._lr_factor(s) for s in range(steps)],
                "clip": cfg.clip,
                "threads": torch.get_num_threads(),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--lr", type=float, default=TrainConfig.model_fields["lr"].default)
    ap.add_argument("--warmup-steps", type=int, default=2, help="learning-rate warmup (both)")
    ap.add_argument("--window", type=int, default=5, help="steps averaged for the loss columns")
    ap.add_argument("--ttt", default="3,7", help="TTT depths, comma-separated")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--json", default="bench/results/train.json")
    args = ap.parse_args()
    load_start = os.getloadavg()
    peer_python = None if args.no_peer else str(speculators_venv() / "bin" / "python")
    model_dir = build_toy(args.preset)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "s.jsonl"
        samples(model_dir, data)
        captured_dir = Path(tmp) / "capture"
        run_capture(
            CaptureConfig(target=model_dir, data=data, out=captured_dir), log=lambda s: None
        )
        for ttt in (int(t) for t in args.ttt.split(",")):

            def cfg(name: str, ttt: int = ttt) -> TrainConfig:
                return TrainConfig(
                    target=model_dir,
                    data=data,
                    out=Path(tmp) / f"{name}{ttt}",
                    steps=args.steps,
                    ttt=ttt,
                    draft_vocab=512,
                    batch_tokens=args.batch_tokens,
                    lr=args.lr,
                    warmup_steps=args.warmup_steps,
                    checkpoint_every=10_000,
                    log_to=["none"],  # timed steps write metrics.jsonl only
                )

            cache: dict = {}
            online = RecordingTrainer(cfg("online"), cache)
            online.setup()
            online_hist = online.train()
            cached = PrecomputedTrainer(cfg("cached"), cache)
            cached.setup()
            cached_hist = cached.train()
            from_disk = Trainer(
                cfg("captured").model_copy(update={"data": None, "hidden_states": captured_dir}),
                log=lambda s: None,
            )
            from_disk.setup()
            disk_hist = from_disk.train()
            online_s, tokens = timed(online_hist, args.warmup)
            drafter_s, _ = timed(cached_hist, args.warmup)
            disk_s, disk_tokens = timed(disk_hist, args.warmup)
            row = {
                "ttt": ttt,
                "steps": args.steps,
                "timed_steps": args.steps - args.warmup,
                "supervised_tokens_timed": tokens,
                "eyas_online_tok_s": round(tokens / online_s, 1),
                "eyas_captured_tok_s": round(disk_tokens / disk_s, 1),
                "captured_vs_online": round((disk_tokens / disk_s) / (tokens / online_s), 2),
                "eyas_drafter_step_tok_s": round(tokens / drafter_s, 1),
                "eyas_loss_first_last": [cached_hist[0].loss, cached_hist[-1].loss],
                "eyas_loss_window_means": window_means([m.loss for m in cached_hist], args.window),
                "eyas_losses": [m.loss for m in cached_hist],
                "lr_first_last": [cached_hist[0].lr, cached_hist[-1].lr],
            }
            if peer_python:
                batches, meta = Path(tmp) / f"peer{ttt}.safetensors", Path(tmp) / "meta.json"
                export_peer_batches(cached, args.steps, batches, meta)
                out = subprocess.run(
                    [
                        peer_python,
                        str(ROOT / "bench" / "peer_speculators_train.py"),
                        "--data",
                        str(batches),
                        "--meta",
                        str(meta),
                        "--verifier",
                        str(model_dir),
                        "--ttt",
                        str(ttt),
                        "--warmup",
                        str(args.warmup),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONWARNINGS": "ignore"},
                )
                peer = json.loads(out.stdout.strip().splitlines()[-1])
                # the eyas drafter step again, right after the peer: on a shared machine the
                # ratio is taken against the mean of the runs before and after it
                again = PrecomputedTrainer(cfg("cached_again"), cache)
                again.setup()
                again_s, _ = timed(again.train(), args.warmup)
                again.cleanup()
                row["eyas_drafter_step_tok_s_before_after_peer"] = [
                    round(tokens / drafter_s, 1),
                    round(tokens / again_s, 1),
                ]
                drafter_s = (drafter_s + again_s) / 2
                row["eyas_drafter_step_tok_s"] = round(tokens / drafter_s, 1)
                row["speculators_tok_s"] = round(tokens / peer["timed_seconds"], 1)
                losses = [round(x, 6) for x in peer["losses"]]
                row["speculators_loss_first_last"] = [losses[0], losses[-1]]
                row["speculators_loss_window_means"] = window_means(losses, args.window)
                row["speculators_losses"] = losses
                row["ratio_vs_speculators"] = round(peer["timed_seconds"] / drafter_s, 2)
            rows.append(row)
            online.cleanup()
            cached.cleanup()
            from_disk.cleanup()
    head = (
        f"{'ttt':>4}{'eyas online':>14}{'eyas captured':>15}{'x online':>10}"
        f"{'eyas drafter':>14}{'speculators':>14}{'ratio':>8}"
        f"{'eyas loss':>18}{'speculators loss':>18}"
    )
    print("supervised tokens/s, CPU, toy", args.preset, f"batch {args.batch_tokens} tokens")
    print(f"loss: mean of the first -> last {args.window} steps (each side on its own scale)")
    print(head)
    for r in rows:
        peer_loss = r.get("speculators_loss_window_means")
        print(
            f"{r['ttt']:>4}{r['eyas_online_tok_s']:>14}{r['eyas_captured_tok_s']:>15}"
            f"{r['captured_vs_online']:>10}{r['eyas_drafter_step_tok_s']:>14}"
            f"{r.get('speculators_tok_s', '-'):>14}{r.get('ratio_vs_speculators', '-'):>8}"
            f"{arrow(r['eyas_loss_window_means']):>18}{arrow(peer_loss):>18}"
        )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "bench": "train",
                "device": "cpu",
                "preset": args.preset,
                "batch_tokens": args.batch_tokens,
                "command": "bench/bench_train.py " + " ".join(sys.argv[1:]),
                "load_average": {"start": load_start, "end": os.getloadavg()},
                "schedule": {
                    "lr": args.lr,
                    "warmup_steps": args.warmup_steps,
                    "decay": "cosine to 0.1 x lr",
                    "peer": "the same factor at every step (lr_factors)",
                },
                "loss_window": args.window,
                "torch_threads": torch.get_num_threads(),
                "peer": None
                if args.no_peer
                else "speculators 0.9.0 Eagle3DraftModel, sdpa, eager kl_div",
                "runs": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
