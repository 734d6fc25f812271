"""Acceptance measured where the drafter is served, through the engines' backends and the one
client policy (`eyas.backends`): the target is never loaded in this process.

    eyas eval ... --backend vllm --url http://spec:8000 --baseline-url http://base:8000
    eyas eval ... --backend vllm --engine-python PY          # eyas starts both servers
    eyas eval ... --backend sglang --url http://spec:30000 --baseline-url http://base:30000

One evaluator serves every engine of the registry (`eyas.backends.registry`) that has an
acceptance hook (`Acceptance`): the engine says how it counts speculative decoding, this module
runs the prompts, the rounds and the lossless check the same way for all.

- vLLM (`eyas.backends.vllm.acceptance`): the target runs with `--speculative-config` (when
  eyas starts it: the drafter's method's config, `eyas.export.serving`, made flags by
  `VLLMServer.drafter_launch`);
  acceptance comes from vLLM's own counters on `/metrics`, read through the pool before and
  after each dataset of each round, the differences summed.
- SGLang (`eyas.backends.sglang.acceptance`): token-id prompts to `/generate`; each finished
  request's `meta_info` carries its verify steps.

**Rounds.** A conversation whose later turns follow the model's own answers (MT-Bench's second
question, BFCL's turns) is evaluated in rounds (`eyas.evaluate.prompts.Rounds`): round 1 is the
prompts as given, each later round is asked after the served outputs of the one before. The
servers stay up for all rounds; every figure is summed over them per dataset.

**Lossless check** (temperature 0). The served outputs are compared with the same engine
serving the target without a drafter (a baseline server: `--baseline-url`, or one eyas starts
where the engine can, `--engine-python`), run twice on the same prompts, round by round (a later
turn is asked after the speculative run's answer, so both sides answer the same prompt). Per
prompt the result gives the first divergence and the share of the baseline's tokens reproduced;
the check fails only when more prompts diverge from the baseline than diverge between the two
baseline runs (what the engine itself does, e.g. batched bf16 decoding on a GPU). Without a
baseline server the check is off, and `lossless_check.note` says so. A request that fails for
good is left out of the figures and listed with its reason under `requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from eyas.backends import registry
from eyas.backends.base import BackendSettings, Generation, GenRequest
from eyas.backends.policy import RequestFailed, ServerPool
from eyas.backends.registry import open_pool
from eyas.errors import EyasError, RefusedError
from eyas.evaluate.categories import grouped
from eyas.evaluate.config import EvalConfig
from eyas.evaluate.prompts import FollowUps, Rounds


class Acceptance(Protocol):
    """How an engine counts speculative decoding (the registry's `acceptance` hook). Per
    dataset of each round: `mark` before its requests, `count` after them (from the servers'
    counters, or from the answers); `add` sums two counts (figures are those of the summed
    counts, never a mean of means); `figures` turns a count into the reported figures. A count
    may carry `answered`: the prompts its figures cover, when fewer than were asked."""

    source: ClassVar[str]  # where the figures come from, for the result
    # whether eval's draft settings (k, topk) reach the measurement; False: the servers' own
    # settings count, and `--bench` measures one configuration ("server")
    follows_settings: ClassVar[bool]
    # whether servers may join mid-run (`--url-file`): False when the figures are deltas of
    # each server's counters, which a server joining between two reads would inflate
    servers_may_join: ClassVar[bool]

    def check_config(self, cfg: EvalConfig) -> None:
        """Refuse settings the engine cannot measure (EyasError)."""

    async def mark(self, pool: ServerPool) -> Any: ...

    async def count(self, pool: ServerPool, mark: Any, answers: dict[str, Generation]) -> dict:
        """`answers`: the dataset's answered requests of this round, by prompt id."""

    def add(self, a: dict, b: dict) -> dict: ...

    def figures(self, counts: dict, k: int) -> dict[str, Any]: ...

    def check_run(self, total: dict) -> None:
        """Refuse a run that shows no speculation at all (`no_speculation`)."""


# -- servers ------------------------------------------------------------------------------------


def _log_dir(cfg: EvalConfig) -> Path:
    """Where the logs of the servers eyas starts go: beside `--json`, else a folder of their
    own that outlives the run (a failed start's message names its log)."""
    if cfg.json_out is not None:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        return cfg.json_out.parent
    return _own_log_dir()


@functools.cache
def _own_log_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="eyas-eval-logs-"))


@contextlib.contextmanager
def engine_servers(cfg: EvalConfig, scratch: Path, drafter: bool, log) -> Iterator[list[str]]:
    """The URLs of the servers with the drafter (or the baseline): the user's, or one that eyas
    starts with the engine's options (its server class, `registry.server_class`). On a machine
    without a CUDA GPU it serves in float32, the precision offline evaluation uses."""
    given = cfg.server.urls if drafter else cfg.baseline_urls
    if given or (drafter and cfg.server.url_file is not None):  # servers also join from the file
        yield given
        return
    engine_server = registry.server_class(cfg.backend)
    if engine_server is None or not engine_server.can_start(cfg.engine):
        flag = registry.start_flag(cfg.backend)
        raise EyasError(
            "bad_flag",
            "a baseline needs --baseline-url"
            + (f" (or, for {cfg.backend}, {flag})" if flag else ""),
        )
    from eyas.backends.server import gpu_present
    from eyas.export.serving import speculative_config
    from eyas.hf_models import target_model

    dtype = "auto" if gpu_present() else "float32"
    args: list[str] = []
    if drafter:
        spec = speculative_config(cfg.backend, cfg.drafter, cfg.target, cfg.k, scratch)
        args = engine_server.drafter_launch(spec, dtype)
    log(f"starting {cfg.backend} ({'with the drafter' if drafter else 'baseline, no drafter'})")
    name = "spec" if drafter else "base"
    log_path = _log_dir(cfg) / f"{cfg.backend}-{name}.log"
    with engine_server(
        cfg.engine, target_model(cfg.target), dtype=dtype, args=args, log_path=log_path
    ) as server:
        yield [server.url]


def _baseline_runs(cfg: EvalConfig) -> tuple[int, str | None]:
    """(baseline runs to make, why the lossless check is off)."""
    available = bool(cfg.baseline_urls) or registry.can_start(cfg.backend, cfg.engine)
    flag = registry.start_flag(cfg.backend)
    if cfg.baseline and not available:
        raise EyasError(
            "bad_flag",
            "--baseline needs the target served without a drafter: --baseline-url URL"
            + (f" or {flag}" if flag else ""),
        )
    if not cfg.lossless_check:
        return int(cfg.baseline), "off: --no-lossless-check"
    if cfg.temperature != 0:
        return int(cfg.baseline), "off: outputs are compared at temperature 0 only"
    if not available:
        return 0, (
            "off: no baseline server. The check compares with the same engine serving the "
            "target without a drafter (--baseline-url"
            + (f", or {flag} to let eyas start one" if flag else "")
            + "); the target is never loaded in this process"
        )
    return 2, None


# -- one served run ------------------------------------------------------------------------------


@dataclass
class _Run:
    """One served run over every round; per-dataset figures are summed over the rounds."""

    rounds: Rounds
    counts: dict[str, dict] = field(default_factory=dict)  # dataset -> the engine's counts
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed: list[dict] = field(default_factory=list)
    client: dict = field(default_factory=dict)
    servers: list[dict] = field(default_factory=list)


def _settings(cfg: EvalConfig) -> BackendSettings:
    from eyas.render.renderer import Renderer

    stop = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code).stop_token_ids()
    return BackendSettings(stop_token_ids=stop)


async def _served_run(
    cfg: EvalConfig, urls: list[str], rounds: Rounds, acceptance: Acceptance | None
) -> _Run:
    """Every round through one pool of the same servers (a later round is asked after this
    run's own outputs of the one before); with `acceptance`, each dataset of each round is
    counted (`mark` before, `count` after) and the counts summed per dataset."""
    run = _Run(rounds)
    # a later round holds at most one prompt per prompt of the round before: round 1 is the
    # widest batch of a dataset
    in_flight = max(len(rows) for rows in _by_dataset(rounds.first).values())
    # the user's drafter servers (the run that counts) take servers from the url file too;
    # the baseline's and those eyas started are asked the same way, at their own URLs only
    own = acceptance is not None and urls == cfg.server.urls
    server = cfg.server if own else cfg.server.serving(urls)
    async with open_pool(
        cfg.backend,
        _settings(cfg),
        server,
        operation="generate",
        options=cfg.engine,
        # default: every prompt of a dataset in flight at once (the batch the figures are
        # measured at)
        concurrency=max(1, in_flight),
    ) as pool:
        run.servers = pool.info
        for batch in rounds:
            for name, rows in sorted(_by_dataset(batch).items()):
                mark = await acceptance.mark(pool) if acceptance else None
                start = time.perf_counter()
                results = await asyncio.gather(
                    *(_one(pool, p, cfg) for p in rows), return_exceptions=True
                )
                run.seconds[name] += time.perf_counter() - start
                answers: dict[str, Generation] = {}
                for p, r in zip(rows, results):
                    if isinstance(r, RequestFailed):
                        run.failed.append(
                            {"id": p["id"], "reason": r.error.reason, "detail": r.error.detail}
                        )
                    elif isinstance(r, BaseException):
                        raise r
                    else:
                        answers[p["id"]] = r
                        rounds.outputs[p["id"]] = r.output_ids
                        run.tokens[name] += len(r.output_ids)
                if pool.stopped_reason:
                    raise RefusedError(
                        "servers_failing",
                        f"served evaluation stopped: {pool.stopped_reason}; failed: "
                        f"{_reasons(run.failed)}, retried: {dict(pool.retry_reasons)}",
                    )
                if acceptance:
                    counts = await acceptance.count(pool, mark, answers)
                    run.counts[name] = acceptance.add(run.counts.get(name, {}), counts)
        run.client = pool.describe()
    return run


async def _one(pool: ServerPool, p: dict, cfg: EvalConfig) -> Generation:
    req = GenRequest(
        id=p["id"],
        prompt_ids=p["prompt_ids"],
        max_new_tokens=cfg.max_new_tokens,
        sampling={"temperature": cfg.temperature, "seed": cfg.seed},
    )
    gen, _ = await pool.call(lambda b: b.generate(req), work=lambda g: len(g.output_ids))
    return gen


def _reasons(failed: list[dict]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for f in failed:
        out[f["reason"]] += 1
    return dict(out)


# -- lossless ------------------------------------------------------------------------------------


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two outputs differ (None when equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def lossless_report(
    ids: list[str], spec: dict[str, list[int]], base: dict[str, list[int]], again: dict
) -> dict[str, Any]:
    """Speculative outputs against two baseline runs of the same engine (see the module)."""
    per_prompt, diverged, noise = [], [], 0
    for pid in ids:
        if pid not in spec or pid not in base or pid not in again:
            continue  # a failed request: listed under `requests`
        d = first_divergence(spec[pid], base[pid])
        n = first_divergence(again[pid], base[pid])
        reproduced = len(base[pid]) if d is None else d
        per_prompt.append(
            {
                "id": pid,
                "first_divergence": d,
                "token_match_rate": round(reproduced / len(base[pid]), 4) if base[pid] else 1.0,
                "baseline_first_divergence": n,
            }
        )
        if d is not None:
            diverged.append(pid)
        noise += n is not None
    compared = len(per_prompt)
    return {
        "lossless": len(diverged) <= noise if compared else None,
        "mismatches": diverged,
        "check": {
            "compared_with": "the same engine without a drafter, run twice",
            "rule": "fails when more prompts diverge from the baseline than between the two "
            "baseline runs",
            "prompts": compared,
            "prompts_diverged": len(diverged),
            "baseline_prompts_diverged": noise,
            "match_rate": round(sum(p["token_match_rate"] for p in per_prompt) / compared, 4)
            if compared
            else None,
            "per_prompt": per_prompt,
        },
    }


# -- the result -----------------------------------------------------------------------------


def _by_dataset(prompts: list[dict]) -> dict[str, list[dict]]:
    by_ds: dict[str, list[dict]] = defaultdict(list)
    for p in prompts:
        by_ds[p["dataset"]].append(p)
    return by_ds


def _serve(
    cfg: EvalConfig,
    prompts: list[dict],
    follow_ups: FollowUps | None,
    log,
    acceptance: Acceptance,
) -> tuple[_Run, list[_Run]]:
    """The run with the drafter over every round, then the baseline runs the check and
    `--baseline` need, on the same prompts round by round. Each server stays up for all
    rounds of its runs."""
    runs, _ = _baseline_runs(cfg)
    with tempfile.TemporaryDirectory(prefix="eyas-eval-") as tmp:
        scratch = Path(tmp)
        with engine_servers(cfg, scratch, True, log) as urls:
            spec = asyncio.run(_served_run(cfg, urls, Rounds(prompts, follow_ups), acceptance))
        base = []
        if runs:
            with engine_servers(cfg, scratch, False, log) as urls:
                base = [
                    asyncio.run(_served_run(cfg, urls, spec.rounds.replay(), None))
                    for _ in range(runs)
                ]
    return spec, base


def _common(cfg: EvalConfig, spec: _Run, base: list[_Run]) -> dict:
    """What both engines report: the lossless check, throughput, requests, every output."""
    _, note = _baseline_runs(cfg)
    if len(base) >= 2:
        report = lossless_report(
            [p["id"] for p in spec.rounds.prompts],
            spec.rounds.outputs,
            *(b.rounds.outputs for b in base[:2]),
        )
        lossless, mismatches, check = report["lossless"], report["mismatches"], report["check"]
    else:
        lossless, mismatches, check = None, [], {"note": note}
    rate = sum(spec.tokens.values()) / max(1e-9, sum(spec.seconds.values()))
    throughput = {"output_tokens_per_s": round(rate, 2)}
    if base:
        base_rate = sum(base[0].tokens.values()) / max(1e-9, sum(base[0].seconds.values()))
        throughput["baseline_output_tokens_per_s"] = round(base_rate, 2)
        throughput["speedup"] = round(rate / max(1e-9, base_rate), 3)
    return {
        "lossless": lossless,
        "lossless_mismatches": mismatches,
        "lossless_check": check,
        "throughput": throughput,
        "batch_size": max(len(rows) for rows in _by_dataset(spec.rounds.first).values()),
        "servers": spec.servers,
        "requests": {
            "failed": spec.failed,
            "failure_reasons": _reasons(spec.failed),
            "retries": spec.client.get("retries", 0),
            "retry_reasons": spec.client.get("retry_reasons", {}),
            "baseline_failed": [f for b in base for f in b.failed],
        },
        "outputs": spec.rounds.outputs,
        "rounds": spec.rounds.sizes,
    }


def evaluate_served(
    cfg: EvalConfig,
    prompts: list[dict],
    log: Callable[[str], None] = print,
    *,
    follow_ups: FollowUps | None = None,
) -> dict:
    """`prompts`, then each round `follow_ups` builds from the served outputs (`Rounds`),
    through the servers of `cfg.backend`, counted by its acceptance hook."""
    acceptance: Acceptance = registry.acceptance(cfg.backend)
    acceptance.check_config(cfg)
    spec, base = _serve(cfg, prompts, follow_ups, log, acceptance)
    total: dict[str, Any] = {}
    for counts in spec.counts.values():
        total = acceptance.add(total, counts)
    acceptance.check_run(total)
    datasets = {}
    for name, rows in sorted(_by_dataset(spec.rounds.prompts).items()):
        counts = spec.counts.get(name, {})
        figures = acceptance.figures(counts, cfg.k)
        datasets[name] = {**figures, "prompts": counts.get("answered", len(rows))}
    categories = {}
    for cat, names in grouped(datasets).items():
        counts: dict[str, Any] = {}
        for name in names:
            counts = acceptance.add(counts, spec.counts.get(name, {}))
        figures = acceptance.figures(counts, cfg.k)
        prompts = sum(datasets[n]["prompts"] for n in names)
        categories[cat] = {**figures, "prompts": prompts, "datasets": names}
    return {
        **acceptance.figures(total, cfg.k),
        "datasets": datasets,
        "categories": categories,
        **_common(cfg, spec, base),
        "source": acceptance.source,
    }
