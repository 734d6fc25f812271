"""`eyas eval`: acceptance length per dataset, offline or inside a serving engine.

    eyas eval --target MODEL_DIR --drafter runs/x/drafter --input runs/x/prepare --k 3 \\
        [--temperature 0] [--max-new-tokens 256] [--limit 50] [--json eval.json]
    eyas eval ... --topk 4 --num-draft-tokens 8          # tree drafts (offline)
    eyas eval ... --backend vllm --vllm-python PY         # inside vLLM (starts a server)
    eyas eval ... --backend sglang --url http://h:30000   # a served SGLang with the drafter
    eyas eval --target DIR --drafter DIR --bench mt_bench,humaneval,bfcl_simple_python \\
        [--html card.html]                                # the model-card table

Offline (`local`) evaluation runs lossless speculative decoding with the target and the
drafter in this process; served backends read the engine's own acceptance counters. At
temperature 0 every output is compared with the target's greedy decoding; any mismatch makes
`lossless` false (exit 1). Settings are reported with every number.

`--bench` evaluates benchmark prompt sets from the cache (`tools/bench_data.sh`), converted
and rendered with the target's own template like `--input`, and reports a model-card table:
acceptance length per benchmark at the configuration published drafters report (SGLang
`--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4`, as
SpecForge's `benchmarks/bench_eagle3.py` runs it; 4 counts the verified token, so eyas's
chain K = 3) and at the user's, thinking on and off as separate rows when the model format has
a thinking switch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from eyas import __version__
from eyas.config import EvalConfig
from eyas.errors import EyasError
from eyas.evaluate.prompts import follow_up_prompts, load_prompts

METRIC = (
    "acceptance_length = tokens per target verify step, bonus included (SGLang definition; "
    "prefill token excluded)"
)
# SGLang --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
PUBLISHED = {"k": 3, "topk": 1, "num_draft_tokens": 3}
PUBLISHED_LABEL = "steps 3, topk 1, 4 draft tokens"


def _dispatch(cfg: EvalConfig, prompts: list[dict], log: Callable[[str], None]) -> dict:
    if cfg.backend == "local":
        from eyas.evaluate.offline import evaluate_offline

        return evaluate_offline(cfg, prompts, log)
    if cfg.backend == "vllm":
        from eyas.evaluate.served import evaluate_vllm

        return evaluate_vllm(cfg, prompts, log)
    from eyas.evaluate.served import evaluate_sglang

    return evaluate_sglang(cfg, prompts, log)


def _settings(cfg: EvalConfig, result: dict, prompts: list[dict]) -> dict[str, Any]:
    return {
        "backend": cfg.backend,
        "k": cfg.k,
        "decoding": "chain" if cfg.topk == 1 else "tree",
        "topk": cfg.topk,
        "num_draft_tokens": cfg.num_draft_tokens or cfg.k,
        "temperature": cfg.temperature,
        "batch_size": result.pop("batch_size", 1),
        "max_new_tokens": cfg.max_new_tokens,
        "prompts": len(prompts),
        "metric": METRIC,
    }


class _TargetAnswers:
    """The target's own greedy answer (what later turns are asked after), computed in this
    process; the target is loaded on first use only."""

    def __init__(self, cfg: EvalConfig, renderer) -> None:
        self.cfg, self.stop = cfg, set(renderer.stop_token_ids())
        self.target = None

    def __call__(self, prompt_ids: list[int]) -> list[int]:
        import torch

        from eyas.evaluate.speculative import greedy_reference
        from eyas.hf_models import load_frozen_lm

        if self.target is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
            self.target = load_frozen_lm(
                self.cfg.target, device, torch.float32, self.cfg.trust_remote_code
            )
        return greedy_reference(self.target, prompt_ids, self.cfg.max_new_tokens, self.stop)


def _with_follow_ups(prompts: list[dict], renderer, answer) -> tuple[list, dict]:
    from eyas.render.renderer import has_unanswered

    pending = [p for p in prompts if has_unanswered(p.get("messages") or [])]
    if not pending:
        return prompts, {}
    more, stopped = follow_up_prompts(pending, renderer, answer)
    return prompts + more, stopped


def run_eval(cfg: EvalConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    if cfg.bench:
        return run_bench_eval(cfg, log)
    prompts = load_prompts(cfg.input, cfg.limit)
    if not prompts:
        raise EyasError("no_input", f"no prompts in {cfg.input}")
    stopped: dict = {}
    if any(p.get("messages") for p in prompts):
        from eyas.render.renderer import Renderer, has_unanswered

        if any(has_unanswered(p.get("messages") or []) for p in prompts):
            renderer = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code)
            answer = _TargetAnswers(cfg, renderer)
            prompts, stopped = _with_follow_ups(prompts, renderer, answer)
    result = _dispatch(cfg, prompts, log)
    result["settings"] = _settings(cfg, result, prompts)
    if stopped:
        result["follow_ups_stopped"] = stopped
    result.update(
        {"target": str(cfg.target), "drafter": str(cfg.drafter), "eyas_version": __version__}
    )
    return result


# -- the model-card table ----------------------------------------------------------------------


def _configs(cfg: EvalConfig) -> list[tuple[str, dict]]:
    """(label, overrides) to run: the published configuration and the user's, once each."""
    user = {"k": cfg.k, "topk": cfg.topk, "num_draft_tokens": cfg.num_draft_tokens or cfg.k}
    if cfg.backend == "sglang":
        # eyas cannot reconfigure a server it did not start: the server's own settings count
        return [("server", {})]
    label = (
        f"chain K={cfg.k}"
        if cfg.topk == 1
        else f"tree depth {cfg.k}, topk {cfg.topk}, {user['num_draft_tokens']} draft tokens"
    )
    if not cfg.published_config or user == PUBLISHED:
        return [(PUBLISHED_LABEL if user == PUBLISHED else label, {})]
    return [(PUBLISHED_LABEL, PUBLISHED), (label, {})]


def run_bench_eval(
    cfg: EvalConfig, log: Callable[[str], None] = print, *, answer=None
) -> dict[str, Any]:
    """Every benchmark of `cfg.bench` at the published and the user's configuration.

    `answer` (prompt ids -> output ids) stands in for the target's greedy answers to earlier
    turns; by default the target is loaded here (tests pass a cheaper one).
    """
    from eyas.benchmarks import benchmark_prompts, resolve
    from eyas.render.probe import probe_template
    from eyas.render.renderer import Renderer

    benches = resolve(cfg.bench)
    base = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code)
    fmt = base.model_format
    answer = answer or _TargetAnswers(cfg, base)
    modes: list[bool | None] = [True, False] if fmt.thinking_key else [None]
    sets, prompts, stopped_by = [], [], {}
    for mode in modes:
        renderer = base.with_thinking(mode)
        probe = probe_template(renderer)
        for bench in benches:
            s = benchmark_prompts(bench, renderer, limit=cfg.limit, probe=probe)
            full, stopped = _with_follow_ups(s.prompts, renderer, answer)
            s.prompts = full
            stopped_by[s.dataset] = stopped
            sets.append(s)
            prompts += full
            log(
                f"{s.dataset}: {len(full)} prompts from {s.rows} rows"
                + (f"; rejected {dict(s.rejected)}" if s.rejected else "")
            )
    if not prompts:
        raise EyasError(
            "no_prompts",
            "no benchmark row renders with this template: "
            + "; ".join(f"{s.dataset}: {dict(s.rejected)}" for s in sets),
        )
    runs: dict[str, dict] = {}
    for label, overrides in _configs(cfg):
        run_cfg = cfg.model_copy(update=overrides)
        log(f"measuring at {label}")
        res = _dispatch(run_cfg, prompts, log)
        res["settings"] = _settings(run_cfg, res, prompts)
        runs[label] = res
    mine = runs[list(runs)[-1]]
    card = _card(sets, runs, stopped_by, fmt.thinking_key)
    return {
        **mine,
        "lossless": card["lossless"],
        "lossless_mismatches": sorted(
            {m for r in runs.values() for m in r.get("lossless_mismatches") or []}
        ),
        "model_card": card,
        "runs": runs,
        "target": str(cfg.target),
        "drafter": str(cfg.drafter),
        "eyas_version": __version__,
    }


def _card(sets, runs: dict[str, dict], stopped_by: dict, thinking_key: str | None) -> dict:
    rows = []
    for s in sets:
        row: dict[str, Any] = {
            "benchmark": s.benchmark,
            "thinking": None if s.thinking is None else ("on" if s.thinking else "off"),
            "rows": s.rows,
            "prompts": len(s.prompts),
            "rejected": dict(s.rejected),
            "follow_ups_stopped": stopped_by.get(s.dataset) or {},
            "acceptance_length": {},
            "mean_accepted_drafts": {},
        }
        for label, res in runs.items():
            d = res["datasets"].get(s.dataset)
            row["acceptance_length"][label] = d["acceptance_length"] if d else None
            row["mean_accepted_drafts"][label] = d["mean_accepted_drafts"] if d else None
        rows.append(row)
    lossless = [r.get("lossless") for r in runs.values()]
    verdict = False if False in lossless else (None if None in lossless else True)
    return {
        "configurations": list(runs),
        "published_configuration": PUBLISHED_LABEL,
        "metric": METRIC,
        "thinking_switch": thinking_key,
        "rows": rows,
        "lossless": verdict,
        "reasons": dict(sum((Counter(s.rejected) for s in sets), Counter())),
    }
