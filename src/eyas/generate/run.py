"""`eyas generate`: regenerate responses with exact token ids.

    eyas generate --config configs/kimi-k2.5-sglang.toml [--shard 0/4]
    eyas generate --model DIR --backend sglang --url http://h:30000 --input prepare/ \\
        --out runs/x/generate --max-new-tokens 2048

Resume is automatic: rerunning the same command skips ids already committed in the output
stage directory, by any job. `--shard i/n` keeps only ids whose sha256 falls in slice i, so
independent jobs (a Slurm array, Kubernetes pods) cover a dataset without coordination; any
number of jobs may write one folder at once (`eyas.store.runs`, docs/cluster.md). SIGTERM
commits what is done (after at most `eyas.jobs.TERM_GRACE_S` of finishing what is in flight) and
exits 143.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from eyas import __version__
from eyas.backends.base import BackendSettings
from eyas.backends.registry import open_pool
from eyas.generate.config import PipelineConfig
from eyas.generate.engine import Engine
from eyas.generate.jobs import load_jobs, plans
from eyas.generate.multiturn import make_multi_turn
from eyas.generate.result import GenerateResult
from eyas.jobs import JobProgress, Stats, StopSignals, sigterm_restored, write_combined_manifest
from eyas.records import SCHEMA_VERSION
from eyas.render.renderer import Renderer
from eyas.store import ShardWriter, committed_ids, shard_paths
from eyas.store.runs import (
    end_job,
    job_errors_path,
    new_job_id,
    part_job,
    run_status,
    start_job,
    write_combined_errors,
)
from eyas.store.shards import id_index, ids_by_job


def _conversation_ids(stage_dir) -> set[str]:
    return {i.split("#")[0] for i in committed_ids(stage_dir)}


def generation_settings(
    renderer: Renderer, model_dir, trust_remote_code: bool = False, api_key: str | None = None
) -> BackendSettings:
    """What any engine's backend needs to generate for this target (the engine's own options
    travel beside it)."""
    thinking = renderer.thinking is not False

    def encode_reply(message: dict) -> list[int]:
        # an engine that answers in text: the reply re-serialised in the model's own format
        return renderer.encode(renderer.model_format.completion_text(message, thinking))

    return BackendSettings(
        stop_token_ids=renderer.stop_token_ids(),
        api_key=api_key,
        model_dir=model_dir,
        pad_token_id=renderer.tokenizer.pad_token_id or 0,
        trust_remote_code=trust_remote_code,
        encode_reply=encode_reply,
        template_kwargs=renderer.template_kwargs,
    )


class _OthersCommitted:
    """Conversation ids other jobs committed into the folder since the last look (only new
    part files are read)."""

    def __init__(self, out: Path, job_id: str, seen: set[Path]):
        self.out, self.job_id, self.seen = out, job_id, set(seen)

    def __call__(self) -> set[str]:
        new = [
            p
            for p in shard_paths(self.out)
            if p not in self.seen and part_job(p.name) != self.job_id
        ]
        self.seen.update(new)
        return {i.split("#")[0] for i in id_index(self.out, new)[0]} if new else set()


async def _generate(cfg: PipelineConfig, renderer: Renderer, show_progress: bool) -> dict[str, Any]:
    out = cfg.generate_out
    out.mkdir(parents=True, exist_ok=True)
    job_id = new_job_id()
    seen = set(shard_paths(out))
    jobs, skipped = load_jobs(cfg, renderer, _conversation_ids(out))
    started = time.time()
    settings = generation_settings(
        renderer, cfg.model.dir, cfg.model.trust_remote_code, cfg.backend.api_key()
    )
    async with open_pool(
        cfg.backend.kind, settings, cfg.backend, operation="generate", options=cfg.engine
    ) as pool:
        record = start_job(out, job_id, _static(cfg, renderer, pool))
        writer = ShardWriter(out, cfg.generate.shard_size, job_id=job_id)
        with (
            job_errors_path(out, job_id).open("ab") as errors,
            JobProgress(len(jobs), label="generate", enabled=show_progress) as bar,
        ):
            engine = Engine(
                pool=pool,
                writer=writer,
                errors=errors,
                flush_s=cfg.generate.flush_s,
                multi_turn=make_multi_turn(renderer),
                on_progress=bar.update,
                done_elsewhere=_OthersCommitted(out, job_id, seen),
            )
            try:
                with StopSignals(engine.stop, engine.cancel) as signals:
                    stats: Stats = await engine.run(jobs)
            finally:
                bar.update(engine.stats, force=True)
        record = end_job(
            out,
            {
                **record,
                # the servers as they ended: those that joined during the run included
                "backend": _static(cfg, renderer, pool)["backend"],
                "complete": not engine.stop.is_set(),
                "stopped_reason": pool.stopped_reason
                or signals.reason
                or ("interrupted" if engine.stop.is_set() else None),
                "this_run": {**stats.as_dict(), "skipped": dict(skipped)},
                "started_unix": started,
            },
        )
    return _combine(out, record)


def _static(cfg: PipelineConfig, renderer: Renderer, pool) -> dict[str, Any]:
    """What this job generated with (its record; the combined manifest repeats the latest)."""
    default, per = plans(cfg)
    return {
        "stage": "generate",
        "eyas_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "input": str(cfg.generate_input),
        "backend": {
            "kind": cfg.backend.kind,
            "lossy": pool.lossy,
            "servers": pool.info,
            "client": pool.describe(),
            **cfg.backend.model_dump(mode="json", exclude={"api_key_env"}),
            "engine": cfg.engine.model_dump(mode="json"),
        },
        "render": renderer.describe(),
        "sampling": {
            "default": default.as_dict(),
            "per_dataset": {k: v.as_dict() for k, v in per.items()},
        },
        "shard": cfg.generate.shard,
    }


def _combine(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Rewrite the folder's combined `manifest.json` and `errors.jsonl` from every job's files
    (a snapshot: `eyas status` recomputes it); return this job's record with the counts."""
    by_job, rows = ids_by_job(out)
    committed = set().union(*by_job.values()) if by_job else set()
    duplicates = rows - len(committed)
    conversations = {i.split("#")[0] for i in committed}
    errors = write_combined_errors(out, by_job)
    status = run_status(out, len(committed), duplicates)
    counts = {
        "conversations_done": len(conversations),
        "samples": len(committed),
        "duplicates": duplicates,
        "failed_outstanding": len(errors),
    }
    write_combined_manifest(out, record, status, counts)
    return {**record, "counts": counts, "run": status}


def run_generate(
    cfg: PipelineConfig, renderer: Renderer, show_progress: bool = True
) -> GenerateResult:
    with sigterm_restored():
        try:  # uvloop roughly halves the client's per-request CPU; plain asyncio works too
            import uvloop

            record = uvloop.run(_generate(cfg, renderer, show_progress))
        except ImportError:
            record = asyncio.run(_generate(cfg, renderer, show_progress))
    return GenerateResult.from_dict(record)
