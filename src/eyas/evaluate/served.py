"""Acceptance measured where the drafter is served, through the engines' backends and the one
client policy (`eyas.backends`): the target is never loaded in this process.

    eyas eval ... --backend vllm --url http://spec:8000 --baseline-url http://base:8000
    eyas eval ... --backend vllm --vllm-python PY            # eyas starts both servers
    eyas eval ... --backend sglang --url http://spec:30000 --baseline-url http://base:30000

- vLLM: the target runs with `--speculative-config {"method": "eagle3", ...}`
  (`_vllm_speculative_config`, asked of the drafter's method); acceptance comes from vLLM's
  own counters on `/metrics` (drafts, draft tokens, accepted tokens, accepted per position),
  read before and after each dataset of each round, the differences summed. A server that exports no spec-decode
  counters has no drafter: that is an error (`no_speculation`), not acceptance 0. A drafter
  that is not already in speculators format is exported for vLLM first.
- SGLang: token-id prompts to `/generate`; a finished request's `meta_info` carries
  `spec_verify_ct` (target verify steps) and `completion_tokens` only when it had verify steps
  (`eyas.backends.sglang.conventions`): a missing count is zero steps (a one-token answer),
  and the run refuses only when no response carries one.

**Rounds.** A conversation whose later turns follow the model's own answers (MT-Bench's second
question, BFCL's turns) is evaluated in rounds (`eyas.evaluate.prompts.Rounds`): round 1 is the
prompts as given, each later round is asked after the served outputs of the one before. The
servers stay up for all rounds; every figure is summed over them per dataset.

`acceptance_length` is tokens per verify step, bonus included, prefill token excluded
(`(completion_tokens - 1) / spec_verify_ct`); SGLang's own `completion_tokens /
spec_verify_ct` counts the prefill token too and is reported beside it as
`sglang_accept_length`.

**Lossless check** (temperature 0). The served outputs are compared with the same engine
serving the target without a drafter (a baseline server: `--baseline-url`, or one eyas starts
with `--vllm-python`), run twice on the same prompts, round by round (a later turn is asked
after the speculative run's answer, so both sides answer the same prompt). Per prompt the
result gives the first divergence and the share of the baseline's tokens reproduced; the check
fails only when more prompts diverge from the baseline than diverge between the two baseline
runs (what the engine itself does, e.g. batched bf16 decoding on a GPU). Without a baseline
server the check is off, and `lossless_check.note` says so. A request that fails for good is
left out of the figures and listed with its reason under `requests`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eyas.backends.base import BackendSettings, Generation, GenRequest
from eyas.backends.policy import ClientPolicy, RequestFailed, ServerPool
from eyas.backends.reasons import BackendError
from eyas.backends.registry import open_pool
from eyas.backends.sglang.conventions import VERIFY_COUNT_KEY
from eyas.backends.vllm.conventions import (
    FLOAT32_MLA_DRAFTER,
    float32_mla_args,
    text_only_args,
)
from eyas.config import EvalConfig
from eyas.errors import EyasError, RefusedError
from eyas.evaluate.prompts import FollowUps, Rounds


def counter_delta(before: dict, after: dict) -> dict[str, Any]:
    """What vLLM's spec-decode counters grew by between two snapshots."""
    pos_after = after.get("accepted_per_pos") or []
    pos_before = before.get("accepted_per_pos") or [0.0] * len(pos_after)
    return {
        "num_drafts": after.get("num_drafts", 0) - before.get("num_drafts", 0),
        "num_accepted_tokens": after.get("num_accepted_tokens", 0)
        - before.get("num_accepted_tokens", 0),
        "accepted_per_pos": [a - b for a, b in zip(pos_after, pos_before)],
    }


def add_counts(a: dict, b: dict) -> dict[str, Any]:
    """Two counter deltas summed (the figures of several rounds or datasets are those of the
    summed counts, never a mean of their means)."""
    pa, pb = a.get("accepted_per_pos") or [], b.get("accepted_per_pos") or []
    width = max(len(pa), len(pb))
    pa, pb = pa + [0.0] * (width - len(pa)), pb + [0.0] * (width - len(pb))
    return {
        "num_drafts": a.get("num_drafts", 0) + b.get("num_drafts", 0),
        "num_accepted_tokens": a.get("num_accepted_tokens", 0) + b.get("num_accepted_tokens", 0),
        "accepted_per_pos": [x + y for x, y in zip(pa, pb)],
    }


def served_metrics(before: dict, after: dict, k: int) -> dict[str, Any]:
    """Acceptance figures from two counter snapshots."""
    return counter_figures(counter_delta(before, after), k)


def counter_figures(counts: dict, k: int) -> dict[str, Any]:
    """Acceptance figures from a counter delta (vLLM's acceptance is a prefix: the
    per-position counts give the exact histogram)."""
    drafts, accepted = counts.get("num_drafts", 0), counts.get("num_accepted_tokens", 0)
    raw = counts.get("accepted_per_pos") or []
    pos = list(raw[:k]) + [0.0] * (k - len(raw))
    reached = [drafts, *pos[:-1]]
    hist = (
        [int(drafts - pos[0])] + [int(pos[i - 1] - pos[i]) for i in range(1, k)] + [int(pos[k - 1])]
    )
    return {
        "verify_steps": int(drafts),
        "acceptance_length": round(1 + accepted / drafts, 4) if drafts else 0.0,
        "mean_accepted_drafts": round(accepted / drafts, 4) if drafts else 0.0,
        "per_position": [round(p / r, 4) if r else 0.0 for p, r in zip(pos[:k], reached[:k])],
        "histogram": hist,
    }


def _vllm_speculative_config(cfg: EvalConfig, drafter_dir: Path) -> dict[str, Any]:
    """vLLM's `--speculative-config` for the drafter's vLLM export: its method names vLLM's
    method (`eagle3` for EAGLE-3 and EAGLE-3.1, `dflash`)."""
    from eyas.drafter.registry import method_reading
    from eyas.jsonl import read_json_object

    method = method_reading(read_json_object(drafter_dir / "config.json"))
    return method.vllm_speculative_config(drafter_dir, cfg.k)


def _is_mla_drafter(drafter_dir: str) -> bool:
    from eyas.drafter.eagle3.export_mla import is_mla

    return is_mla(json.loads((Path(drafter_dir) / "config.json").read_text()))


def _vllm_drafter(cfg: EvalConfig, scratch: Path) -> Path:
    """A speculators-format drafter directory vLLM can load."""
    from eyas.drafter.load import resolve_drafter_dir
    from eyas.export.drafter import export_drafter

    folder = resolve_drafter_dir(cfg.drafter)
    config = folder / "config.json"
    if config.exists() and json.loads(config.read_text()).get("speculators_model_type"):
        return folder
    if (
        config.exists()
        and _is_mla_drafter(str(folder))
        and json.loads(config.read_text()).get("eagle_aux_hidden_state_layer_ids")
    ):
        return folder  # the vLLM layout of an MLA drafter: ids at the top level
    return export_drafter(folder, "vllm", scratch / "vllm-drafter", cfg.target, cfg.k)


# -- servers ------------------------------------------------------------------------------------


@contextlib.contextmanager
def _started_vllm(cfg: EvalConfig, scratch: Path, drafter: bool, log) -> Iterator[list[str]]:
    import torch

    from eyas.hf_models import target_model
    from eyas.serving.vllm import vllm_server

    target = target_model(cfg.target)
    args = ["--max-model-len", str(min(target.context_length, 8192)), "--enforce-eager"]
    args += text_only_args(target.wrapper)
    cuda = torch.cuda.is_available()
    if not cuda:
        args += ["--dtype", "float32"]  # a CPU engine: the precision offline evaluation uses
        args += float32_mla_args(target.text, "float32")
    if drafter:
        spec = _vllm_speculative_config(cfg, _vllm_drafter(cfg, scratch))
        if not cuda and _is_mla_drafter(spec["model"]):
            spec.update(FLOAT32_MLA_DRAFTER)
        args += ["--speculative-config", json.dumps(spec)]
    log(f"starting vLLM ({'with the drafter' if drafter else 'baseline, no drafter'})")
    name = "spec" if drafter else "base"
    with vllm_server(
        cfg.vllm_python, cfg.target, args, log_path=_log_dir(cfg) / f"vllm-{name}.log"
    ) as url:
        yield [url]


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
def _servers(cfg: EvalConfig, scratch: Path, drafter: bool, log) -> Iterator[list[str]]:
    """The URLs of the servers with the drafter (or the baseline): the user's, or vLLM
    servers eyas starts."""
    given = cfg.urls if drafter else cfg.baseline_urls
    if given or (drafter and cfg.url_file is not None):  # servers also join from the file
        yield given
        return
    if cfg.backend != "vllm" or cfg.vllm_python is None:
        raise EyasError("bad_flag", "a baseline needs --baseline-url (or, for vLLM, --vllm-python)")
    with _started_vllm(cfg, scratch, drafter, log) as urls:
        yield urls


def _baseline_runs(cfg: EvalConfig) -> tuple[int, str | None]:
    """(baseline runs to make, why the lossless check is off)."""
    available = bool(cfg.baseline_urls) or (cfg.backend == "vllm" and cfg.vllm_python is not None)
    if cfg.baseline and not available:
        raise EyasError(
            "bad_flag",
            "--baseline needs the target served without a drafter: --baseline-url URL"
            + (" or --vllm-python" if cfg.backend == "vllm" else ""),
        )
    if not cfg.lossless_check:
        return int(cfg.baseline), "off: --no-lossless-check"
    if cfg.temperature != 0:
        return int(cfg.baseline), "off: outputs are compared at temperature 0 only"
    if not available:
        return 0, (
            "off: no baseline server. The check compares with the same engine serving the "
            "target without a drafter (--baseline-url"
            + (", or --vllm-python to let eyas start one" if cfg.backend == "vllm" else "")
            + "); the target is never loaded in this process"
        )
    return 2, None


# -- one served run ------------------------------------------------------------------------------


@dataclass
class _Run:
    """One served run over every round; per-dataset figures are summed over the rounds."""

    rounds: Rounds
    metas: dict[str, dict] = field(default_factory=dict)
    counts: dict[str, dict] = field(default_factory=dict)  # dataset -> vLLM counter delta
    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed: list[dict] = field(default_factory=list)
    client: dict = field(default_factory=dict)
    servers: list[dict] = field(default_factory=list)


def _settings(cfg: EvalConfig) -> BackendSettings:
    from eyas.render.renderer import Renderer

    stop = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code).stop_token_ids()
    return BackendSettings(stop_token_ids=stop)


def _policy(cfg: EvalConfig, in_flight: int) -> ClientPolicy:
    # every prompt of a dataset in flight at once (the batch the figures are measured at)
    return ClientPolicy.from_retry(
        cfg.retry, concurrency=max(1, in_flight), adaptive=False, timeout_s=cfg.timeout_s
    )


async def _spec_counters(pool: ServerPool) -> dict[str, Any]:
    """vLLM's spec-decode counters summed over the pool's servers; no_speculation when a
    server exports none (it runs without a drafter)."""
    total: dict[str, Any] = defaultdict(float)
    per_pos: list[float] = []
    for backend in pool.backends:
        snap = await _read_counters(pool, backend)
        if not snap["present"]:
            raise EyasError(
                "no_speculation",
                f"the vLLM server at {backend.url} exports no spec-decode counters: it runs "
                "without a drafter (start it with --speculative-config)",
            )
        for key, value in snap.items():
            if key == "accepted_per_pos":
                per_pos = [a + b for a, b in zip(value, per_pos)] + value[len(per_pos) :]
            elif key != "present":
                total[key] += value
    return {**total, "accepted_per_pos": per_pos}


async def _read_counters(pool: ServerPool, backend: Any) -> dict[str, Any]:
    """One server's counters, retried under the pool's policy like a request: a server that
    dies between two datasets stops the run as one that dies mid-request does
    (`servers_failing`, the reason and the retries named), not with a bare error."""
    policy = pool.policy
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return await backend.spec_metrics()
        except BackendError as exc:
            if not exc.retryable:
                raise RefusedError(
                    exc.reason, f"reading the spec-decode counters of {backend.url}: {exc.detail}"
                ) from exc
            last = exc
            if attempt < policy.max_attempts:
                pool.retries += 1
                pool.retry_reasons[exc.reason] += 1
                await asyncio.sleep(
                    min(policy.max_backoff_s, policy.backoff_s * 2 ** (attempt - 1))
                )
    raise RefusedError(
        "servers_failing",
        f"served evaluation stopped: reading the spec-decode counters of {backend.url} failed "
        f"after {policy.max_attempts} attempts (last: {last.reason}); retried: "
        f"{dict(pool.retry_reasons)}; {last.detail}",
    )


async def _served_run(cfg: EvalConfig, urls: list[str], rounds: Rounds, count: bool) -> _Run:
    """Every round through one pool of the same servers (a later round is asked after this
    run's own outputs of the one before); vLLM's counters are read before and after each
    dataset of each round, and the deltas summed."""
    run = _Run(rounds)
    # a later round holds at most one prompt per prompt of the round before: round 1 is the
    # widest batch of a dataset
    in_flight = max(len(rows) for rows in _by_dataset(rounds.first).values())
    async with open_pool(
        cfg.backend,
        _settings(cfg),
        urls,
        _policy(cfg, in_flight),
        operation="generate",
        url_file=cfg.url_file if count else None,  # the drafter's servers, not the baseline's
        url_file_s=cfg.url_file_s,
    ) as pool:
        run.servers = pool.info
        counting = count and cfg.backend == "vllm"
        for batch in rounds:
            for name, rows in sorted(_by_dataset(batch).items()):
                before = await _spec_counters(pool) if counting else {}
                start = time.perf_counter()
                results = await asyncio.gather(
                    *(_one(pool, p, cfg) for p in rows), return_exceptions=True
                )
                run.seconds[name] += time.perf_counter() - start
                for p, r in zip(rows, results):
                    if isinstance(r, RequestFailed):
                        run.failed.append(
                            {"id": p["id"], "reason": r.error.reason, "detail": r.error.detail}
                        )
                    elif isinstance(r, BaseException):
                        raise r
                    else:
                        rounds.outputs[p["id"]], run.metas[p["id"]] = r.output_ids, r.meta
                        run.tokens[name] += len(r.output_ids)
                if pool.stopped_reason:
                    raise RefusedError(
                        "servers_failing",
                        f"served evaluation stopped: {pool.stopped_reason}; failed: "
                        f"{_reasons(run.failed)}, retried: {dict(pool.retry_reasons)}",
                    )
                if counting:
                    delta = counter_delta(before, await _spec_counters(pool))
                    run.counts[name] = add_counts(run.counts.get(name, {}), delta)
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


# -- the two engines -----------------------------------------------------------------------------


def _by_dataset(prompts: list[dict]) -> dict[str, list[dict]]:
    by_ds: dict[str, list[dict]] = defaultdict(list)
    for p in prompts:
        by_ds[p["dataset"]].append(p)
    return by_ds


def _serve(
    cfg: EvalConfig, prompts: list[dict], follow_ups: FollowUps | None, log
) -> tuple[_Run, list[_Run]]:
    """The run with the drafter over every round, then the baseline runs the check and
    `--baseline` need, on the same prompts round by round. Each server stays up for all
    rounds of its runs."""
    runs, _ = _baseline_runs(cfg)
    with tempfile.TemporaryDirectory(prefix="eyas-eval-") as tmp:
        scratch = Path(tmp)
        with _servers(cfg, scratch, True, log) as urls:
            spec = asyncio.run(_served_run(cfg, urls, Rounds(prompts, follow_ups), count=True))
        base = []
        if runs:
            with _servers(cfg, scratch, False, log) as urls:
                base = [
                    asyncio.run(_served_run(cfg, urls, spec.rounds.replay(), count=False))
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


def evaluate_vllm(
    cfg: EvalConfig,
    prompts: list[dict],
    log: Callable[[str], None] = print,
    *,
    follow_ups: FollowUps | None = None,
) -> dict:
    """`prompts`, then each round `follow_ups` builds from the served outputs (`Rounds`)."""
    if cfg.topk > 1:
        raise EyasError(
            "bad_flag", "served vLLM evaluation runs chains (topk 1); trees: --backend local"
        )
    spec, base = _serve(cfg, prompts, follow_ups, log)
    by_ds = _by_dataset(spec.rounds.prompts)
    total: dict[str, Any] = {}
    for counts in spec.counts.values():
        total = add_counts(total, counts)
    return {
        **counter_figures(total, cfg.k),
        "datasets": {
            name: {**counter_figures(spec.counts.get(name, {}), cfg.k), "prompts": len(rows)}
            for name, rows in sorted(by_ds.items())
        },
        **_common(cfg, spec, base),
        "source": "vllm /metrics counters",
    }


def _sglang_figures(verify: list[int], completion: list[int]) -> dict:
    steps, produced = sum(verify), sum(completion)
    return {
        "verify_steps": steps,
        "acceptance_length": round((produced - len(completion)) / steps, 4) if steps else 0.0,
        "mean_accepted_drafts": round((produced - len(completion)) / steps - 1, 4)
        if steps
        else 0.0,
        "sglang_accept_length": round(produced / steps, 4) if steps else 0.0,
        "per_position": [],
        "histogram": None,
    }


def evaluate_sglang(
    cfg: EvalConfig,
    prompts: list[dict],
    log: Callable[[str], None] = print,
    *,
    follow_ups: FollowUps | None = None,
) -> dict:
    """`prompts`, then each round `follow_ups` builds from the served outputs (`Rounds`)."""
    spec, base = _serve(cfg, prompts, follow_ups, log)
    if spec.metas and not any(VERIFY_COUNT_KEY in m for m in spec.metas.values()):
        raise EyasError(
            "no_speculation",
            f"no SGLang response carries {VERIFY_COUNT_KEY}: is the server running with "
            "--speculative-algorithm EAGLE3 and the drafter?",
        )
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"verify": [], "completion": []})
    for p in spec.rounds.prompts:
        meta = spec.metas.get(p["id"])
        if meta is None:
            continue  # failed: listed under `requests`
        # a response without the count had no verify step (SGLang writes it only when > 0)
        per_ds[p["dataset"]]["verify"].append(int(meta.get(VERIFY_COUNT_KEY, 0)))
        completion = meta.get("completion_tokens", len(spec.rounds.outputs[p["id"]]))
        per_ds[p["dataset"]]["completion"].append(int(completion))
    all_v = [v for d in per_ds.values() for v in d["verify"]]
    all_c = [c for d in per_ds.values() for c in d["completion"]]
    return {
        **_sglang_figures(all_v, all_c),
        "datasets": {
            name: {**_sglang_figures(d["verify"], d["completion"]), "prompts": len(d["verify"])}
            for name, d in sorted(per_ds.items())
        },
        **_common(cfg, spec, base),
        "source": "sglang meta_info spec_verify_ct",
    }
