"""`eyas prepare` and `eyas generate`: the stage entry points.

    eyas prepare --config configs/kimi-k2.5-sglang.toml
    eyas generate --config configs/kimi-k2.5-sglang.toml [--shard 0/4]
    eyas generate --model DIR --backend sglang --url http://h:30000 --input prepare/ \\
        --out runs/x/generate --max-new-tokens 2048

Resume is automatic: rerunning the same command skips ids already committed in the output
stage directory. `--shard i/n` keeps only ids whose hash falls in slice i, so independent jobs
(a Slurm array, Kubernetes pods) cover a dataset without coordination.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from eyas import __version__
from eyas.backends.base import Backend, BackendError
from eyas.config import BackendConfig, PipelineConfig, RetryConfig, SamplingConfig
from eyas.generate.engine import Engine, Job, Stats
from eyas.generate.multiturn import make_multi_turn
from eyas.jsonl import write_json
from eyas.records import SCHEMA_VERSION, Conversation, RowError
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.sources import convert_rows, detect_format, read_rows
from eyas.store import ShardWriter, committed_ids


class StageError(ValueError):
    """The stage cannot run on this input; `reason` is a stable code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# -- prepare ------------------------------------------------------------------------------------


def prepare(cfg: PipelineConfig, renderer: Renderer) -> dict[str, Any]:
    """Convert and render every dataset into `<run>/prepare/{conversations,rendered}/`."""
    out = cfg.stage_dir("prepare")
    summary: dict[str, Any] = {}
    for ds in cfg.datasets:
        fmt = ds.format if ds.format != "auto" else detect_format(read_rows(ds.path))
        conv_path = out / "conversations" / f"{ds.name}.jsonl"
        conv_path.parent.mkdir(parents=True, exist_ok=True)
        reasons: Counter = Counter()
        n_ok = 0
        with (
            conv_path.open("wb") as f,
            (out / "conversations" / f"{ds.name}.errors.jsonl").open("wb") as e,
        ):
            for item in convert_rows(
                islice(read_rows(ds.path), ds.limit), fmt, ds.name, str(ds.path)
            ):
                if isinstance(item, RowError):
                    reasons[item.reason] += 1
                    e.write(orjson.dumps(item.to_dict()) + b"\n")
                else:
                    n_ok += 1
                    f.write(orjson.dumps(item.to_dict()) + b"\n")
        rendered = render_file(renderer, conv_path, out / "rendered" / f"{ds.name}.jsonl")
        summary[ds.name] = {
            "format": fmt,
            "converted": n_ok,
            "convert_reasons": dict(reasons),
            "rendered": rendered.num_rendered,
            "render_reasons": dict(rendered.reasons),
        }
    write_json(
        out / "manifest.json",
        {
            "stage": "prepare",
            "eyas_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "config": cfg.model_dump(mode="json"),
            "render": renderer.describe(),
            "datasets": summary,
        },
    )
    return summary


# -- generate -----------------------------------------------------------------------------------


@dataclass
class DatasetPlan:
    max_new_tokens: int
    sampling: dict[str, Any]
    multi_turn: str = "last"


@dataclass
class GenerateOptions:
    input: Path
    out: Path
    backend: BackendConfig
    default: DatasetPlan
    per_dataset: dict[str, DatasetPlan] = field(default_factory=dict)
    shard: tuple[int, int] = (0, 1)
    shard_size: int = 2000
    flush_s: float = 30.0
    show_progress: bool = True


def sampling_dict(s: SamplingConfig) -> dict[str, Any]:
    return {k: v for k, v in s.model_dump().items() if v is not None}


def parse_shard(text: str) -> tuple[int, int]:
    i, sep, n = text.partition("/")
    if not sep or not i.isdigit() or not n.isdigit() or not 0 <= int(i) < int(n):
        raise StageError("bad_shard", f"--shard takes i/n with 0 <= i < n, not {text!r}")
    return int(i), int(n)


def in_shard(sample_id: str, shard: tuple[int, int]) -> bool:
    i, n = shard
    if n == 1:
        return True
    return int(sample_id[:8], 16) % n == i if sample_id[:8].isalnum() else hash(sample_id) % n == i


def rendered_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    root = path / "rendered" if (path / "rendered").is_dir() else path
    files = sorted(p for p in root.glob("*.jsonl") if not p.name.endswith(".errors.jsonl"))
    if not files:
        raise StageError("no_input", f"no rendered .jsonl files in {path}")
    return files


def _check_fingerprint(file: Path, renderer: Renderer) -> None:
    manifest = file.with_name(file.name.removesuffix(".jsonl") + ".manifest.json")
    if not manifest.exists():
        return
    render = orjson.loads(manifest.read_bytes()).get("render", {})
    for key, mine in (
        ("tokenizer_sha256", renderer.fingerprint),
        ("template_sha256", renderer.template_sha256),
    ):
        if render.get(key) and render[key] != mine:
            raise StageError(
                "fingerprint_mismatch",
                f"{file} was rendered with {key}={render[key][:12]}…, but "
                f"{renderer.model_dir} has {mine[:12]}…; re-run prepare/render",
            )


def load_jobs(
    opts: GenerateOptions, renderer: Renderer, done: set[str]
) -> tuple[list[Job], Counter]:
    jobs: list[Job] = []
    skipped: Counter = Counter()
    for file in rendered_files(opts.input):
        _check_fingerprint(file, renderer)
        with file.open("rb") as f:
            for line in f:
                if not line.strip():
                    continue
                row = orjson.loads(line)
                if "prompt_ids" not in row:
                    raise StageError(
                        "not_rendered", f"{file}: lines need prompt_ids (run eyas render)"
                    )
                conv = Conversation.from_dict(row)
                if not in_shard(conv.id, opts.shard):
                    skipped["other_shard"] += 1
                    continue
                if conv.id in done:
                    skipped["already_done"] += 1
                    continue
                plan = opts.per_dataset.get(conv.dataset, opts.default)
                jobs.append(
                    Job(
                        conv.id,
                        conv.dataset,
                        conv.messages,
                        conv.tools,
                        row["prompt_ids"],
                        row.get("turn", -1),
                        plan.max_new_tokens,
                        plan.sampling,
                        plan.multi_turn,
                    )
                )
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise StageError("duplicate_id", f"id {dup} appears more than once in the input")
    return jobs, skipped


def build_backends(
    cfg: BackendConfig, renderer: Renderer, model_dir: Path, session
) -> list[Backend]:
    stop = renderer.stop_token_ids()
    api_key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
    if cfg.kind == "local":
        from eyas.backends.local import LocalBackend

        return [
            LocalBackend(model_dir, stop, renderer.tokenizer.pad_token_id or 0, cfg.concurrency)
        ]
    if cfg.kind == "sglang":
        from eyas.backends.sglang import SGLangBackend

        return [
            SGLangBackend(u, session, stop, cfg.timeout_s, api_key, cfg.batch_size)
            for u in cfg.urls
        ]
    if cfg.kind == "vllm":
        from eyas.backends.vllm import VLLMBackend

        return [
            VLLMBackend(
                u, session, stop, cfg.timeout_s, api_key, cfg.vllm_endpoint, cfg.served_model
            )
            for u in cfg.urls
        ]
    from eyas.backends.openai_chat import OpenAIChatBackend
    from eyas.toy.train import completion_text

    def encode_reply(message: dict) -> list[int]:
        return renderer.encode(completion_text(message))

    return [
        OpenAIChatBackend(
            u,
            session,
            encode_reply,
            cfg.served_model,
            cfg.timeout_s,
            api_key,
            renderer.template_kwargs,
        )
        for u in cfg.urls
    ]


async def _generate(opts: GenerateOptions, renderer: Renderer, model_dir: Path) -> dict[str, Any]:
    import aiohttp

    opts.out.mkdir(parents=True, exist_ok=True)
    done = {i.split("#")[0] for i in committed_ids(opts.out)}
    jobs, skipped = load_jobs(opts, renderer, done)
    errors_path = opts.out / "errors.jsonl"
    # errors.jsonl describes the latest run: ids that failed before are not done, so they
    # are retried now and their new outcome is recorded.
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    started = time.time()
    async with aiohttp.ClientSession(connector=connector) as session:
        backends = build_backends(opts.backend, renderer, model_dir, session)
        servers = []
        for b in backends:
            try:
                servers.append(await b.ready(opts.backend.ready_timeout_s))
            except BackendError as exc:
                raise StageError(exc.reason, exc.detail) from exc
        writer = ShardWriter(opts.out, opts.shard_size)
        from eyas.generate.progress import GenerationProgress

        with (
            errors_path.open("wb") as errors,
            GenerationProgress(len(jobs), enabled=opts.show_progress) as bar,
        ):
            engine = Engine(
                backends,
                writer,
                errors,
                opts.backend.retry,
                opts.backend.concurrency,
                opts.flush_s,
                make_multi_turn(renderer),
                bar.update,
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
                for b in backends:
                    await b.close()
    committed = committed_ids(opts.out)
    all_done = {i.split("#")[0] for i in committed}
    manifest = {
        "stage": "generate",
        "eyas_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "complete": not engine.stop.is_set(),
        "stopped_reason": engine.stopped_reason
        or ("interrupted" if engine.stop.is_set() else None),
        "input": str(opts.input),
        "backend": {
            "kind": opts.backend.kind,
            "lossy": any(b.lossy for b in backends),
            "servers": servers,
            **opts.backend.model_dump(mode="json", exclude={"api_key_env"}),
        },
        "render": renderer.describe(),
        "sampling": {
            "default": opts.default.__dict__,
            "per_dataset": {k: v.__dict__ for k, v in opts.per_dataset.items()},
        },
        "shard": f"{opts.shard[0]}/{opts.shard[1]}",
        "this_run": {**stats.as_dict(), "skipped": dict(skipped), "started_unix": started},
        "counts": {"conversations_done": len(all_done), "samples": len(committed)},
    }
    write_json(opts.out / "manifest.json", manifest)
    return manifest


def run_generate(opts: GenerateOptions, renderer: Renderer, model_dir: Path) -> dict[str, Any]:
    try:  # uvloop roughly halves the client's per-request CPU; plain asyncio works too
        import uvloop

        return uvloop.run(_generate(opts, renderer, model_dir))
    except ImportError:
        return asyncio.run(_generate(opts, renderer, model_dir))


def options_from_config(cfg: PipelineConfig, shard: tuple[int, int] = (0, 1)) -> GenerateOptions:
    default = DatasetPlan(cfg.generate.max_new_tokens, sampling_dict(cfg.sampling))
    per = {
        d.name: DatasetPlan(
            d.max_new_tokens or cfg.generate.max_new_tokens,
            sampling_dict(d.sampling or cfg.sampling),
            d.multi_turn,
        )
        for d in cfg.datasets
    }
    return GenerateOptions(
        cfg.stage_dir("prepare"),
        cfg.stage_dir("generate"),
        cfg.backend,
        default,
        per,
        shard,
        cfg.generate.shard_size,
        cfg.generate.flush_s,
    )


def flag_options(
    input: Path,
    out: Path,
    backend: str,
    urls: list[str],
    max_new_tokens: int,
    temperature: float,
    concurrency: int,
    shard: str,
    multi_turn: str,
    timeout_s: float,
    max_attempts: int,
) -> GenerateOptions:
    cfg = BackendConfig(
        kind=backend,
        urls=urls,
        concurrency=concurrency,
        timeout_s=timeout_s,
        retry=RetryConfig(max_attempts=max_attempts),
    )
    plan = DatasetPlan(
        max_new_tokens, sampling_dict(SamplingConfig(temperature=temperature)), multi_turn
    )
    return GenerateOptions(input, out, cfg, plan, shard=parse_shard(shard))
