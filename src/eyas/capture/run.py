"""`eyas capture`: the target's hidden states for drafter training, through the engine that
serves it.

    eyas capture --target /models/Kimi-K2.5 --data runs/k/generate --out runs/k/capture \\
        --backend vllm --url http://capture-host:8000
    eyas capture --target DIR --data runs/x/generate --out runs/x/capture \\
        --backend vllm --engine-python ~/.venvs/vllm/bin/python    # eyas starts the server
    eyas capture --target DIR --data runs/x/generate --out runs/x/capture   # in process

Each trainable sample (the store's rule, quarantine honoured) is prefilled once as
`prompt_ids + output_ids`; the aux layers and the last layer are stored in safetensors shards
(`eyas.store.captures`). Like generate it resumes by id (rerun the same command), commits
shards atomically, and sends its requests through the one client policy
(`eyas.backends.policy`): adaptive in-flight limits, progress-aware timeouts, retries by reason
code (a torn capture file is read again, then retried), permanent failures recorded with their
reason in `errors.jsonl`, and the circuit breaker, which stops the run resumably (exit 1).
Before starting it prints bytes per token x tokens, and refuses when the output filesystem
lacks the space (unless `--force`). Like generate, `--shard i/n` takes one slice of the ids and
any number of capture jobs may write one folder at once (`eyas.store.runs`); SIGTERM commits
what is captured, stops a server eyas started, and exits 143.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from eyas import __version__
from eyas.backends import registry
from eyas.backends.base import BackendSettings
from eyas.backends.policy import RequestFailed, ServerPool
from eyas.backends.registry import backend_class, open_pool
from eyas.capture.config import CaptureConfig
from eyas.capture.result import CaptureDryRun, CaptureResult
from eyas.drafter.names import DEFAULT_METHOD
from eyas.drafter.registry import get_method
from eyas.errors import EyasError, RefusedError
from eyas.hf_models import TargetModel, target_model
from eyas.jobs import (
    ErrorLog,
    JobProgress,
    Stats,
    StopSignals,
    Terminated,
    in_shard,
    parse_shard,
    sigterm_unwinds,
    write_combined_manifest,
)
from eyas.records import RequestError
from eyas.store import load_table, quarantined_ids, select_trainable
from eyas.store.captures import CaptureWriter, capture_counts, captured_ids
from eyas.store.runs import (
    end_job,
    job_errors_path,
    new_job_id,
    run_status,
    start_job,
    write_combined_errors,
)

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def capture_layers(
    target: Path,
    aux_layers: list[int] | None,
    method: str = DEFAULT_METHOD,
    method_cfg: Any = None,
    model: TargetModel | None = None,
) -> tuple[list[int], TargetModel]:
    """(aux ids + [N], the target): HF `hidden_states` indices; the last is the final layer
    before its norm. The aux ids are the ones the drafter `method` fuses (its default for this
    target, or `aux_layers`, which it must accept): a capture serves one method's training.
    `method_cfg`: the training config when the capture streams into training (a DFlash
    drafter's default layers follow its `draft_layers`); `model`: the target already read (its
    directory is not read again)."""
    model = model or target_model(target)
    depth = model.num_layers
    drafter = get_method(method)
    aux = aux_layers or drafter.default_aux_layers(depth, method_cfg)
    drafter.check_aux_layers(aux, depth)
    return [*aux, depth], model


def bytes_per_token(hidden_size: int, num_layers: int, dtype: torch.dtype) -> int:
    """States plus the stored input id (int32) and loss-mask entry (int8)."""
    return num_layers * hidden_size * torch.tensor([], dtype=dtype).element_size() + 5


def _check_space(out: Path, needed: int, force: bool, log: Callable[[str], None]) -> None:
    free = shutil.disk_usage(out if out.exists() else out.parent).free
    log(f"storage: {needed / 1e9:.2f} GB needed, {free / 1e9:.1f} GB free at {out}")
    if needed > free and not force:
        raise RefusedError(
            "not_enough_disk",
            f"the capture needs {needed / 1e9:.2f} GB and {out} has {free / 1e9:.1f} GB free; "
            "free space, pick another --out, stream with `eyas train --capture-ahead`, or pass "
            "--force",
        )


def capture_settings(target: Path, layers: list[int], trust_remote_code: bool) -> BackendSettings:
    """What a capturing engine's backend needs (in process: CPU, float32, as online)."""
    return BackendSettings(
        model_dir=Path(target),
        capture_layers=layers,
        trust_remote_code=trust_remote_code,
        device="cpu",
    )


async def capture_one(pool: ServerPool, sample_id: str, ids: list[int], layers: list[int]):
    """[T, L, H] states of one sequence through the pool (RequestFailed when it gives up)."""
    states, attempts = await pool.call(lambda b: b.capture(sample_id, ids), work=lambda _: len(ids))
    if states.shape[1] != len(layers) or states.shape[0] != len(ids):
        raise EyasError(
            "bad_capture",
            f"{sample_id}: states {tuple(states.shape)} for {len(ids)} tokens and "
            f"{len(layers)} layers",
        )
    return states, attempts


@contextlib.asynccontextmanager
async def _pool(cfg: CaptureConfig, layers: list[int], target: TargetModel, log):
    """The configured capture engine's pool: the user's servers, or one that eyas starts with
    the engine's options (`--engine-python`), writing the states of `layers` under
    `--storage-dir` (default OUT/.incoming)."""
    settings = capture_settings(cfg.target, layers, cfg.trust_remote_code)
    server = cfg.server
    if server.urls or server.url_file or not registry.can_start(cfg.backend, cfg.engine):
        async with open_pool(
            cfg.backend, settings, server, operation="capture", options=cfg.engine
        ) as pool:
            yield pool
        return
    engine_server = registry.server_class(cfg.backend)
    assert engine_server is not None  # can_start
    storage = cfg.storage_dir or (cfg.out / ".incoming")
    storage.mkdir(parents=True, exist_ok=True)
    launch = engine_server.capture_launch(layers, storage)
    log(f"starting a {cfg.backend} capture server")
    with engine_server(
        cfg.engine,
        target,
        dtype="float32" if cfg.dtype == "float32" else "auto",
        args=launch.args,
        env=launch.env,
        log_path=cfg.out / f"{cfg.backend}-server.log",
        ready_timeout_s=server.ready_timeout_s,
    ) as started:
        async with open_pool(
            cfg.backend,
            settings,
            server.serving([started.url]),
            operation="capture",
            options=cfg.engine,
        ) as pool:
            yield pool


async def _run(cfg: CaptureConfig, jobs: list[dict], layers, target, log, job_id) -> dict:
    dtype = DTYPES[cfg.dtype]
    writer = CaptureWriter(cfg.out, cfg.shard_size, dtype, job_id=job_id)
    stats = Stats(total=len(jobs))
    async with _pool(cfg, layers, target, log) as pool:
        queue = iter(jobs)
        tasks: list[asyncio.Task] = []

        def cancel() -> None:
            for task in tasks:
                task.cancel()

        with (
            job_errors_path(cfg.out, job_id).open("ab") as file,
            JobProgress(len(jobs), label="capture") as bar,
        ):
            errors = ErrorLog(file, stats)

            async def one(job: dict) -> None:
                try:
                    states, _ = await capture_one(pool, job["id"], job["ids"], layers)
                except RequestFailed as exc:
                    stats.failed += 1
                    errors.add(
                        RequestError(
                            job["id"],
                            exc.error.reason,
                            exc.error.detail,
                            exc.attempts,
                            job["dataset"],
                        )
                    )
                    return
                # A shard commit (concatenate, serialise, fsync) runs off the event loop, so
                # the requests in flight keep the server busy meanwhile; the writer only locks
                # to append, so shards complete in parallel.
                await asyncio.to_thread(
                    writer.add, job["id"], job["dataset"], states, job["ids"], job["mask"]
                )
                stats.samples += 1
                stats.output_tokens += len(job["ids"])

            async def worker() -> None:
                for job in queue:
                    if pool.stop.is_set():
                        return
                    await one(job)
                    stats.done += 1
                    stats.retries, stats.retry_reasons = pool.retries, pool.retry_reasons
                    bar.update(stats)

            try:  # enough workers for every server's ceiling, more as servers join
                with StopSignals(pool.stop, cancel) as signals:
                    await pool.fill(worker, len(jobs), tasks)
            finally:
                await asyncio.to_thread(writer.flush)
                bar.update(stats, force=True)
        return {
            "servers": pool.info,
            "client": pool.describe(),
            "stopped_reason": pool.stopped_reason or signals.reason,
            "this_run": stats.as_dict(),
        }


def _capture_jobs(cfg: CaptureConfig, target: TargetModel):
    """(jobs to capture, excluded by reason, skipped by reason, ids done, quarantine file)."""
    table = load_table(cfg.data)
    quarantined, qfile = quarantined_ids(cfg.data, cfg.quarantine, cfg.include_quarantined)
    keep, excluded = select_trainable(table, cfg.truncated, quarantined)
    done = captured_ids(cfg.out)
    shard = parse_shard(cfg.shard)
    skipped: Counter = Counter()
    jobs = []
    for i in keep:
        if not in_shard(table.ids[i], shard):
            skipped["other_shard"] += 1
            continue
        ids = table.prompt.row(i).tolist() + table.output.row(i).tolist()
        if cfg.max_len and len(ids) > cfg.max_len:
            excluded["over_max_len"] += 1
            continue
        if table.ids[i] in done:
            skipped["already_done"] += 1
            continue
        vocab = target.vocab_size
        if max(ids) >= vocab:
            raise EyasError("token_out_of_vocab", f"sample {table.ids[i]} holds ids >= {vocab}")
        mask = [0] * len(table.prompt.row(i)) + table.supervised(i).astype(int).tolist()
        jobs.append({"id": table.ids[i], "dataset": table.dataset[i], "ids": ids, "mask": mask})
    if cfg.limit is not None:
        jobs = jobs[: max(0, cfg.limit - len(done))]
    return jobs, excluded, skipped, done, qfile


def run_capture(
    cfg: CaptureConfig, log: Callable[[str], None] = print
) -> CaptureResult | CaptureDryRun:
    layers, target = capture_layers(cfg.target, cfg.aux_layers, cfg.method)
    cfg.out.mkdir(parents=True, exist_ok=True)
    job_id = new_job_id()
    jobs, excluded, skipped, done, qfile = _capture_jobs(cfg, target)
    dtype = DTYPES[cfg.dtype]
    per_token = bytes_per_token(target.hidden_size, len(layers), dtype)
    tokens = sum(len(j["ids"]) for j in jobs)
    log(
        f"capture: {len(jobs)} samples to go ({len(done)} done), {tokens:,} tokens x "
        f"{per_token:,} bytes/token"
    )
    _check_space(cfg.out, tokens * per_token, cfg.force or cfg.dry_run, log)
    if cfg.dry_run:  # the cluster recipe sizes its storage with this (docs/cluster.md)
        return CaptureDryRun(
            dry_run=True,
            samples_to_go=len(jobs),
            tokens_to_go=tokens,
            bytes_per_token=per_token,
            storage_needed_bytes=tokens * per_token,
        )
    record = start_job(
        cfg.out,
        job_id,
        {
            "stage": "capture",
            "eyas_version": __version__,
            "input": str(cfg.data),
            "target": {
                **target.describe(),
                "config_sha256": _sha256((Path(cfg.target) / "config.json").read_bytes()),
            },
            "backend": cfg.backend,
            "method": cfg.method,  # the drafter method whose fused layers these are
            "aux_layers": layers[:-1],
            "layers": layers,
            "layer_convention": "hf hidden_states index; the last is the final layer before "
            "its norm",
            "dtype": cfg.dtype,
            "bytes_per_token": per_token,
            "quarantine": str(qfile) if qfile else None,
            "excluded": dict(excluded),
            "shard": cfg.shard,
            "storage_needed_bytes": tokens * per_token,
            "config": cfg.model_dump(mode="json"),
        },
    )
    threads = torch.get_num_threads()
    if backend_class(cfg.backend).remote:
        # The client only copies tensors; several intra-op threads fighting the server for
        # the same cores make each copy hundreds of times slower (measured: 0.5 s per shard).
        torch.set_num_threads(1)
    try:
        with sigterm_unwinds():
            run = asyncio.run(_run(cfg, jobs, layers, target, log, job_id)) if jobs else {}
    except Terminated:  # before the requests started (a local server still loading)
        run = {"stopped_reason": "terminated"}
    finally:
        torch.set_num_threads(threads)
    this_run = {**run.get("this_run", {}), "skipped": dict(skipped)}
    record = end_job(
        cfg.out,
        {
            **record,
            "servers": run.get("servers", []),
            "client": run.get("client"),
            "complete": run.get("stopped_reason") is None,
            "stopped_reason": run.get("stopped_reason"),
            "this_run": this_run,
            "failure_reasons": this_run.get("failure_reasons", {}),
        },
    )
    counts, by_job = capture_counts(cfg.out)
    errors = write_combined_errors(cfg.out, by_job)
    counts["failed"] = len(errors)
    status = run_status(cfg.out, counts["samples"], counts["duplicates"])
    write_combined_manifest(cfg.out, record, status, counts)
    manifest = CaptureResult.from_dict({**record, "counts": counts, "run": status})
    reason = run.get("stopped_reason")
    if reason and reason not in ("terminated", "interrupted"):
        raise RefusedError(
            "servers_failing",
            f"capture stopped: {reason}; {counts['samples']} samples are committed "
            f"in {cfg.out}: fix the servers and rerun the same command to resume",
        )
    return manifest


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


__all__ = ["bytes_per_token", "capture_layers", "run_capture"]
