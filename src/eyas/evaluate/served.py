"""Acceptance measured where the drafter is served.

- vLLM: the target runs with `--speculative-config {"method": "eagle3", ...}`; acceptance
  comes from vLLM's own counters on `/metrics` (drafts, draft tokens, accepted tokens, accepted
  per position), read before and after each dataset and differenced. A drafter that is not
  already in speculators format is exported for vLLM first.
- SGLang: token-id prompts to `/generate`; each finished request's `meta_info` carries
  `spec_verify_ct` (target verify steps) and `completion_tokens`, and recent builds
  `spec_num_correct_drafts` / `spec_num_proposed_drafts`.

`acceptance_length` is tokens per verify step, bonus included, prefill token excluded
(`(completion_tokens - 1) / spec_verify_ct`); SGLang's own `completion_tokens /
spec_verify_ct` counts the prefill token too and is reported beside it as
`sglang_accept_length`. At temperature 0 the served outputs are compared with the target's
greedy decoding (a run without the drafter when `--baseline`, else the target in process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from eyas.backends.base import json_headers, post_bytes, wait_http_ready
from eyas.backends.vllm.conventions import parse_spec_metrics
from eyas.config import EvalConfig
from eyas.errors import EyasError


def served_metrics(before: dict, after: dict, k: int) -> dict[str, Any]:
    """Acceptance figures from two counter snapshots (vLLM's acceptance is a prefix: the
    per-position counts give the exact histogram)."""
    drafts = after.get("num_drafts", 0) - before.get("num_drafts", 0)
    accepted = after.get("num_accepted_tokens", 0) - before.get("num_accepted_tokens", 0)
    pos_after = after.get("accepted_per_pos") or []
    pos_before = before.get("accepted_per_pos") or [0.0] * len(pos_after)
    pos = [a - b for a, b in zip(pos_after, pos_before)] + [0.0] * (k - len(pos_after))
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


def _vllm_drafter(cfg: EvalConfig, scratch: Path) -> Path:
    """A speculators-format drafter directory vLLM can load."""
    from eyas.drafter.load import resolve_drafter_dir
    from eyas.export.drafter import export_drafter

    folder = resolve_drafter_dir(cfg.drafter)
    config = folder / "config.json"
    if config.exists() and json.loads(config.read_text()).get("speculators_model_type"):
        return folder
    return export_drafter(folder, "vllm", scratch / "vllm-drafter", cfg.target, cfg.k)


def speculative_config(cfg: EvalConfig, scratch: Path) -> dict:
    """vLLM's `--speculative-config` for the drafter: its method names vLLM's method
    (`eagle3` for EAGLE-3 and EAGLE-3.1, `dflash`) for its vLLM export."""
    from eyas.drafter.registry import method_reading

    folder = _vllm_drafter(cfg, scratch)
    method = method_reading(json.loads((folder / "config.json").read_text()))
    return method.vllm_speculative_config(folder, cfg.k)


async def _complete(session, url: str, prompts: list[dict], cfg: EvalConfig, model: str):
    """Token-id completions, all in flight at once; returns ids per prompt and seconds."""
    headers = json_headers(None)
    timeout = aiohttp.ClientTimeout(total=3600)

    async def one(p: dict) -> list[int]:
        payload = {
            "model": model,
            "prompt": p["prompt_ids"],
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
            "seed": cfg.seed,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        body = await post_bytes(
            session, url + "/v1/completions", orjson.dumps(payload), headers, timeout
        )
        return orjson.loads(body)["choices"][0]["token_ids"]

    start = time.perf_counter()
    outs = await asyncio.gather(*(one(p) for p in prompts))
    return outs, time.perf_counter() - start


async def _metrics(session, url: str) -> dict:
    async with session.get(url + "/metrics") as r:
        return parse_spec_metrics(await r.text())


async def _served_model(session, url: str) -> str:
    await wait_http_ready(session, url, ("/health", "/v1/models"), 600)
    async with session.get(url + "/v1/models") as r:
        return orjson.loads(await r.read())["data"][0]["id"]


@contextlib.contextmanager
def _vllm(cfg: EvalConfig, scratch: Path, speculative: bool, log):
    """The URL of a vLLM server: the user's, or one eyas starts (with or without the drafter)."""
    if cfg.urls and speculative:
        yield cfg.urls[0]
        return
    if cfg.vllm_python is None:
        raise EyasError(
            "bad_flag", "--baseline with --url needs --vllm-python to start a second server"
        )
    import torch

    from eyas.hf_models import target_model
    from eyas.serving.vllm import vllm_server

    ctx = target_model(cfg.target).context_length
    args = ["--max-model-len", str(min(ctx, 8192)), "--enforce-eager"]
    if not torch.cuda.is_available():
        args += ["--dtype", "float32"]  # a CPU engine: the precision offline evaluation uses
    if speculative:
        args += ["--speculative-config", json.dumps(speculative_config(cfg, scratch))]
    log(f"starting vLLM ({'with the drafter' if speculative else 'baseline, no drafter'})")
    name = "spec" if speculative else "base"
    with vllm_server(
        cfg.vllm_python, cfg.target, args, log_path=scratch / f"vllm-{name}.log"
    ) as url:
        yield url


def _lossless(cfg: EvalConfig, prompts: list[dict], outputs: list[list[int]], baseline) -> tuple:
    if cfg.temperature != 0 or not cfg.lossless_check:
        return None, []
    if baseline is None:
        import torch

        from eyas.evaluate.speculative import greedy_reference
        from eyas.hf_models import load_frozen_lm
        from eyas.render.renderer import Renderer

        target = load_frozen_lm(cfg.target, "cpu", torch.float32, cfg.trust_remote_code)
        stop = set(Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code).stop_token_ids())
        baseline = [
            greedy_reference(target, p["prompt_ids"], cfg.max_new_tokens, stop) for p in prompts
        ]
    bad = [p["id"] for p, a, b in zip(prompts, outputs, baseline) if a != b]
    return not bad, bad


def evaluate_vllm(cfg: EvalConfig, prompts: list[dict], log: Callable[[str], None] = print) -> dict:
    if cfg.topk > 1:
        raise EyasError(
            "bad_flag", "served vLLM evaluation runs chains (topk 1); trees: --backend local"
        )
    by_ds: dict[str, list[dict]] = defaultdict(list)
    for p in prompts:
        by_ds[p["dataset"]].append(p)

    async def run(url: str, count: bool) -> tuple[dict, dict, dict, dict]:
        async with aiohttp.ClientSession() as session:
            model = await _served_model(session, url)
            figures, outputs, seconds, tokens = {}, {}, {}, {}
            for name, rows in sorted(by_ds.items()):
                before = await _metrics(session, url) if count else {}
                outs, secs = await _complete(session, url, rows, cfg, model)
                if count:
                    figures[name] = served_metrics(before, await _metrics(session, url), cfg.k)
                outputs[name], seconds[name], tokens[name] = outs, secs, sum(map(len, outs))
            return figures, outputs, seconds, tokens

    with tempfile.TemporaryDirectory(prefix="eyas-eval-") as tmp:
        scratch = Path(tmp)
        with _vllm(cfg, scratch, True, log) as url:
            figures, outputs, seconds, tokens = asyncio.run(run(url, True))
        base = None
        if cfg.baseline:
            with _vllm(cfg, scratch, False, log) as url:
                _, base, base_seconds, base_tokens = asyncio.run(run(url, False))
    flat = [o for name in sorted(by_ds) for o in outputs[name]]
    ordered = [p for name in sorted(by_ds) for p in by_ds[name]]
    base_flat = [o for name in sorted(by_ds) for o in base[name]] if base else None
    lossless, bad = _lossless(cfg, ordered, flat, base_flat)
    steps = sum(f["verify_steps"] for f in figures.values())
    accepted = sum(f["mean_accepted_drafts"] * f["verify_steps"] for f in figures.values())
    hist = [sum(f["histogram"][a] for f in figures.values()) for a in range(cfg.k + 1)]
    reached = [steps, *[sum(hist[a:]) for a in range(1, cfg.k)]]
    passed = [sum(hist[a:]) for a in range(1, cfg.k + 1)]
    throughput = {
        "output_tokens_per_s": round(sum(tokens.values()) / max(1e-9, sum(seconds.values())), 2)
    }
    if cfg.baseline:
        base_rate = sum(base_tokens.values()) / max(1e-9, sum(base_seconds.values()))
        throughput["baseline_output_tokens_per_s"] = round(base_rate, 2)
        throughput["speedup"] = round(throughput["output_tokens_per_s"] / max(1e-9, base_rate), 3)
    return {
        "verify_steps": steps,
        "acceptance_length": round(1 + accepted / steps, 4) if steps else 0.0,
        "mean_accepted_drafts": round(accepted / steps, 4) if steps else 0.0,
        "per_position": [round(p / r, 4) if r else 0.0 for p, r in zip(passed, reached)],
        "histogram": hist,
        "lossless": lossless,
        "lossless_mismatches": bad,
        "datasets": {
            name: {**figures[name], "prompts": len(by_ds[name])} for name in sorted(by_ds)
        },
        "throughput": throughput,
        "batch_size": max(len(rows) for rows in by_ds.values()),
        "source": "vllm /metrics counters",
    }


def evaluate_sglang(
    cfg: EvalConfig, prompts: list[dict], log: Callable[[str], None] = print
) -> dict:
    from eyas.render.renderer import Renderer

    stop = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code).stop_token_ids()

    async def run() -> tuple[list[dict], float]:
        async with aiohttp.ClientSession() as session:
            url = cfg.urls[0].rstrip("/")
            await wait_http_ready(session, url, ("/health", "/health_generate"), 600)
            timeout = aiohttp.ClientTimeout(total=3600)

            async def one(p: dict) -> dict:
                payload = {
                    "input_ids": p["prompt_ids"],
                    "sampling_params": {
                        "max_new_tokens": cfg.max_new_tokens,
                        "temperature": cfg.temperature,
                        "stop_token_ids": stop,
                        "skip_special_tokens": False,
                    },
                }
                body = await post_bytes(
                    session, url + "/generate", orjson.dumps(payload), json_headers(None), timeout
                )
                return orjson.loads(body)

            start = time.perf_counter()
            results = await asyncio.gather(*(one(p) for p in prompts))
            return results, time.perf_counter() - start

    results, seconds = asyncio.run(run())
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"verify": [], "completion": []})
    for p, r in zip(prompts, results):
        meta = r["meta_info"]
        if "spec_verify_ct" not in meta:
            raise EyasError(
                "no_speculation",
                "the SGLang server reports no spec_verify_ct: is it running with "
                "--speculative-algorithm EAGLE3 and the drafter?",
            )
        per_ds[p["dataset"]]["verify"].append(int(meta["spec_verify_ct"]))
        per_ds[p["dataset"]]["completion"].append(int(meta["completion_tokens"]))

    def figures(verify: list[int], completion: list[int]) -> dict:
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

    all_v = [v for d in per_ds.values() for v in d["verify"]]
    all_c = [c for d in per_ds.values() for c in d["completion"]]
    outputs = [r["output_ids"] for r in results]
    if cfg.lossless_check:
        lossless, bad = _lossless(cfg, prompts, outputs, None)
    else:
        lossless, bad = None, []
    return {
        **figures(all_v, all_c),
        "lossless": lossless,
        "lossless_mismatches": bad,
        "datasets": {
            name: {**figures(d["verify"], d["completion"]), "prompts": len(d["verify"])}
            for name, d in sorted(per_ds.items())
        },
        "throughput": {"output_tokens_per_s": round(sum(all_c) / max(1e-9, seconds), 2)},
        "batch_size": len(prompts),
        "source": "sglang meta_info spec_verify_ct",
    }
