"""`eyas` capture and train: the target's states and the drafter."""

from __future__ import annotations

import os
import sys

import typer

from eyas.capture.config import CaptureConfig
from eyas.cli_schema import Flag, schema_flags
from eyas.commands.common import (
    ENGINE_FLAGS,
    INCLUDE_TRUNCATED,
    console,
    run_line,
    server_flags,
    user_errors,
)
from eyas.drafter.options import OLD_KEYS, flag_name, method_option_keys
from eyas.train.config import TrainConfig

# every method's own options under its name (`--dflash.block-size`), and the flags they had
# before they were nested, each read with one `deprecated:` line
METHOD_FLAGS = (
    *(Flag(key, flag_name(key)) for key in method_option_keys()),
    *(Flag(new, flag_name(old), now=flag_name(new)) for old, new in OLD_KEYS.items()),
)


@user_errors
@schema_flags(
    CaptureConfig,
    "target",
    "data",
    "out",
    "backend",
    *server_flags("server"),
    *ENGINE_FLAGS,
    "storage_dir",
    "method",
    "aux_layers",
    "dtype",
    "shard_size",
    "max_len",
    "limit",
    "truncated",
    INCLUDE_TRUNCATED,
    "quarantine",
    "include_quarantined",
    "force",
    "shard",
    "dry_run",
    "trust_remote_code",
)
def capture(cfg: CaptureConfig) -> None:
    """Capture the target's hidden states for drafter training (resumable)."""
    from eyas.capture.result import CaptureDryRun
    from eyas.capture.run import run_capture

    result = run_capture(cfg, log=console.print)
    if isinstance(result, CaptureDryRun):
        return
    counts = result.counts
    console.print(
        f"{counts.samples} samples captured in {cfg.out} "
        f"({counts.tokens} tokens, {result.bytes_per_token} bytes/token)"
    )
    if counts.failed:
        console.print(f"failed: {result.failure_reasons} (see {cfg.out / 'errors.jsonl'})")
    run_line(result.run)
    if result.stopped_reason in ("terminated", "interrupted"):
        console.print(f"[yellow]{result.stopped_reason}: rerun the same command to resume[/]")
        raise typer.Exit(143 if result.stopped_reason == "terminated" else 130)


@user_errors
@schema_flags(
    TrainConfig,
    "target",
    "data",
    "hidden_states",
    "capture_ahead",
    "capture_backend",
    *server_flags("capture_server", "capture-"),
    "spool_dir",
    "spool_mb",
    "out",
    "method",
    "draft_layers",
    "head_dim",
    "steps",
    "ttt",
    "draft_vocab",
    "max_len",
    "length_policy",
    "lr",
    "warmup_steps",
    "batch_tokens",
    "grad_accum",
    "aux_layers",
    "chunk_len",
    "quarantine",
    "include_quarantined",
    "truncated",
    INCLUDE_TRUNCATED,
    "fsdp",
    "precision",
    "activation_checkpointing",
    "activation_checkpointing_above",
    "fast_path",
    "checkpoint_every",
    "keep_last",
    "log_to",
    "trust_remote_code",
    "attention",
    *METHOD_FLAGS,  # every method's own options, from its package
)
def train(cfg: TrainConfig) -> None:
    """Train a drafter (EAGLE-3, EAGLE-3.1 or DFlash; target online, or from captured
    states); rerun to resume."""
    from rich.progress import Progress

    from eyas.train.loop import Trainer
    from eyas.train.result import StepMetrics

    cfg.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log=console.print)
    try:
        trainer.setup()  # data, target and drafter: a mistake surfaces before any progress bar
        with Progress(console=console) as bar:
            task = bar.add_task("train", total=cfg.steps, completed=trainer.step)

            def on_step(m: StepMetrics) -> None:
                bar.update(
                    task,
                    completed=m.step,
                    description=f"train loss {m.loss:.3f} acc0 {m.per_step_acc[0]:.2f}",
                )

            trainer.train(on_step)
        path = trainer.finish()
    finally:
        trainer.cleanup()
    console.print(f"drafter -> {path}")
    if trainer.world > 1:
        # Everything is written and the process group destroyed. Skip interpreter teardown:
        # gloo's worker threads can abort the process there (SIGABRT, "terminate called
        # without an active exception"; pytorch/pytorch#179291), which torchrun would report as
        # a failed job. Seen once in CI on a loaded 2-core machine.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
