"""`eyas generate`: regenerate responses with exact token ids.

    eyas generate --config configs/kimi-k2.5-sglang.toml [--shard 0/4]
    eyas generate --model DIR --backend sglang --url http://h:30000 --input prepare/ \\
        --out runs/x/generate --max-new-tokens 2048

Resume is automatic: rerunning the same command skips ids already committed in the output
stage directory. `--shard i/n` keeps only ids whose sha256 falls in slice i, so independent
jobs (a Slurm array, Kubernetes pods) cover a dataset without coordination.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from eyas import __version__
from eyas.backends.base import BackendSettings
from eyas.backends.policy import ClientPolicy
from eyas.backends.registry import open_pool
from eyas.config import BackendConfig, PipelineConfig
from eyas.generate.engine import Engine, Stats
from eyas.generate.jobs import load_jobs, plans
from eyas.generate.multiturn import make_multi_turn
from eyas.generate.progress import GenerationProgress
from eyas.jsonl import write_json
from eyas.records import SCHEMA_VERSION
from eyas.render.renderer import Renderer
from eyas.store import ShardWriter, committed_ids


def _conversation_ids(stage_dir) -> set[str]:
    return {i.split("#")[0] for i in committed_ids(stage_dir)}


def generation_settings(
    cfg: BackendConfig, renderer: Renderer, model_dir, trust_remote_code: bool = False
) -> BackendSettings:
    """What any engine's backend needs to generate for this target."""
    thinking = renderer.thinking is not False

    def encode_reply(message: dict) -> list[int]:
        # openai_chat's lossy step: the reply's text re-serialised in the model's own format
        return renderer.encode(renderer.model_format.completion_text(message, thinking))

    return BackendSettings(
        stop_token_ids=renderer.stop_token_ids(),
        api_key=os.environ.get(cfg.api_key_env) if cfg.api_key_env else None,
        # sglang: prompts per call; local: prompts per batch (its in-flight limit)
        batch_size=cfg.batch_size if cfg.kind != "local" else cfg.concurrency,
        vllm_endpoint=cfg.vllm_endpoint,
        served_model=cfg.served_model,
        model_dir=model_dir,
        pad_token_id=renderer.tokenizer.pad_token_id or 0,
        trust_remote_code=trust_remote_code,
        encode_reply=encode_reply,
        template_kwargs=renderer.template_kwargs,
    )


def generation_policy(cfg: BackendConfig) -> ClientPolicy:
    return ClientPolicy.from_retry(
        cfg.retry,
        concurrency=cfg.concurrency,
        adaptive=cfg.adaptive_concurrency and cfg.kind != "local",
        timeout_s=cfg.timeout_s,
        ready_timeout_s=cfg.ready_timeout_s,
    )


async def _generate(cfg: PipelineConfig, renderer: Renderer, show_progress: bool) -> dict[str, Any]:
    out = cfg.generate_out
    out.mkdir(parents=True, exist_ok=True)
    jobs, skipped = load_jobs(cfg, renderer, _conversation_ids(out))
    # errors.jsonl describes the latest run: ids that failed before are not done, so they
    # are retried now and their new outcome is recorded.
    started = time.time()
    settings = generation_settings(
        cfg.backend, renderer, cfg.model.dir, cfg.model.trust_remote_code
    )
    async with open_pool(
        cfg.backend.kind,
        settings,
        cfg.backend.urls,
        generation_policy(cfg.backend),
        operation="generate",
        url_file=cfg.backend.url_file,
        url_file_s=cfg.backend.url_file_s,
    ) as pool:
        writer = ShardWriter(out, cfg.generate.shard_size)
        with (
            (out / "errors.jsonl").open("wb") as errors,
            GenerationProgress(len(jobs), enabled=show_progress) as bar,
        ):
            engine = Engine(
                pool=pool,
                writer=writer,
                errors=errors,
                flush_s=cfg.generate.flush_s,
                multi_turn=make_multi_turn(renderer),
                on_progress=bar.update,
            )
            loop = asyncio.get_running_loop()
            interrupts = 0

            def on_signal() -> None:
                nonlocal interrupts
                interrupts += 1
                engine.stop.set()  # first: finish in-flight, flush; second: cancel now
                if interrupts > 1:
                    for task in asyncio.all_tasks(loop):
                        if task is not asyncio.current_task(loop):
                            task.cancel()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, on_signal)
            try:
                stats: Stats = await engine.run(jobs)
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                bar.update(engine.stats, force=True)
        return _manifest(cfg, renderer, engine, stats, pool, skipped, started)


def _manifest(cfg, renderer, engine, stats, pool, skipped, started) -> dict[str, Any]:
    out = cfg.generate_out
    committed = committed_ids(out)
    default, per = plans(cfg)
    manifest = {
        "stage": "generate",
        "eyas_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "complete": not engine.stop.is_set(),
        "stopped_reason": engine.stopped_reason
        or ("interrupted" if engine.stop.is_set() else None),
        "input": str(cfg.generate_input),
        "backend": {
            "kind": cfg.backend.kind,
            "lossy": pool.lossy,
            "servers": pool.info,
            "client": pool.describe(),
            **cfg.backend.model_dump(mode="json", exclude={"api_key_env"}),
        },
        "render": renderer.describe(),
        "sampling": {
            "default": default.as_dict(),
            "per_dataset": {k: v.as_dict() for k, v in per.items()},
        },
        "shard": cfg.generate.shard,
        "this_run": {**stats.as_dict(), "skipped": dict(skipped), "started_unix": started},
        "counts": {
            "conversations_done": len({i.split("#")[0] for i in committed}),
            "samples": len(committed),
        },
    }
    write_json(out / "manifest.json", manifest)
    return manifest


def run_generate(
    cfg: PipelineConfig, renderer: Renderer, show_progress: bool = True
) -> dict[str, Any]:
    try:  # uvloop roughly halves the client's per-request CPU; plain asyncio works too
        import uvloop

        return uvloop.run(_generate(cfg, renderer, show_progress))
    except ImportError:
        return asyncio.run(_generate(cfg, renderer, show_progress))
