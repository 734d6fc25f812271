"""`eyas eval`: acceptance length per dataset, offline or inside a serving engine.

    eyas eval --target MODEL_DIR --drafter runs/x/drafter --input runs/x/prepare --k 3 \\
        [--temperature 0] [--max-new-tokens 256] [--limit 50] [--json eval.json]
    eyas eval ... --topk 4 --num-draft-tokens 8          # tree drafts (offline)
    eyas eval ... --backend vllm --engine-python PY       # inside vLLM (eyas starts the servers)
    eyas eval ... --backend sglang --url http://h:30000 [--baseline-url http://b:30000]
    eyas eval --target DIR --drafter DIR --bench mt_bench,humaneval,bfcl_simple_python \\
        [--html card.html]                                # the model-card table

Offline (`local`) evaluation runs lossless speculative decoding with the target and the
drafter in this process, and at temperature 0 compares every output with the target's greedy
decoding. Served backends read the engine's own acceptance counters and never load the target
here: their lossless check compares with the same engine serving the target without a drafter
(`--baseline-url`, or a server eyas starts with `--engine-python`), run twice, and is off, with a
note in the result, without one (`eyas.evaluate.served`). A failed check makes `lossless`
false (exit 1). Settings are reported with every number.

**Rounds.** A conversation whose later user turns the source leaves to follow the model's own
answers (MT-Bench's second question, BFCL's multi-turn rows) is evaluated in rounds: round 1 is
the prompts as given; the evaluator returns every prompt's output ids, and the next round's
prompts are built from them (`eyas.evaluate.prompts.follow_up_prompts`), until a round is
empty. The engine being evaluated answers the earlier turns: at temperature 0 a lossless
speculative output is the target's greedy answer; above it, the later turns follow the run's
own samples (`follow_ups.asked_after` says which). The target (offline) or the servers (served)
stay loaded for all rounds, and the figures of every dataset are summed over them.

`--bench` evaluates benchmark prompt sets from the cache (`tools/bench_data.sh`), converted
and rendered with the target's own template like `--input`, and reports a model-card table:
acceptance length per benchmark at the configuration published drafters report (SGLang
`--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4`, as
SpecForge's `benchmarks/bench_eagle3.py` runs it; 4 counts the verified token, so eyas's
chain K = 3) and at the user's, thinking on and off as separate rows when the model format has
a thinking switch; each configuration runs its own rounds.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

from eyas import __version__
from eyas.errors import EyasError
from eyas.evaluate import prompts as eval_prompts
from eyas.evaluate.config import EvalConfig
from eyas.evaluate.result import CardRow, EvalResult, EvalRun, ModelCard

METRIC = (
    "acceptance_length = tokens per target verify step, bonus included (SGLang definition; "
    "prefill token excluded)"
)
# SGLang --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4
PUBLISHED = {"k": 3, "topk": 1, "num_draft_tokens": 3}
PUBLISHED_LABEL = "steps 3, topk 1, 4 draft tokens"


def _dispatch(
    cfg: EvalConfig,
    prompts: list[dict],
    log: Callable[[str], None],
    *,
    renderers: Mapping[str, Any] | None = None,
) -> EvalRun:
    """Every round of `prompts` through the configured evaluator (`renderers`: dataset -> the
    renderer of its mode, else the target's default); the result carries the follow-up
    provenance (`follow_ups`) and the settings, the outputs stay out of it. The evaluator
    returns the documented dict; it is read into `EvalRun` here."""
    follow = _FollowUps(cfg, prompts, renderers or {}, log)
    from eyas.backends.registry import offline_eval

    # offline (in process) or served, as the engine's entry says
    if offline_eval(cfg.backend):
        from eyas.evaluate.offline import evaluate_offline as evaluate
    else:
        from eyas.evaluate.served import evaluate_served as evaluate
    result = evaluate(cfg, prompts, log, follow_ups=follow if follow.active else None)
    result.pop("outputs", None)  # every prompt's ids: what the rounds need, not the report
    result["follow_ups"] = follow.describe(result.pop("rounds", None) or [len(prompts)])
    result["settings"] = _settings(cfg, result)
    return EvalRun.from_dict(result)


class _FollowUps:
    """The next round's prompts from this round's outputs (`follow_up_prompts`), each prompt
    rendered in its dataset's mode (a benchmark set per thinking mode); counts, per dataset,
    the conversations that stopped early and why."""

    def __init__(
        self, cfg: EvalConfig, prompts: list[dict], renderers: Mapping[str, Any], log
    ) -> None:
        from eyas.render.renderer import has_unanswered

        self.cfg, self.log, self.round = cfg, log, 1
        self.active = any(has_unanswered(p.get("messages") or []) for p in prompts)
        self.renderers = dict(renderers)
        self.default = None
        self.stopped: dict[str, Counter] = defaultdict(Counter)

    def _renderer(self, dataset: str):
        if dataset in self.renderers:
            return self.renderers[dataset]
        if self.default is None:
            from eyas.render.renderer import Renderer

            self.default = Renderer(self.cfg.target, trust_remote_code=self.cfg.trust_remote_code)
        return self.default

    def __call__(self, prompts: list[dict], outputs: Mapping[str, list[int]]) -> list[dict]:
        by_ds: dict[str, list[dict]] = defaultdict(list)
        for p in prompts:
            by_ds[p["dataset"]].append(p)
        out: list[dict] = []
        for name, rows in by_ds.items():
            more, stopped = eval_prompts.follow_up_prompts(rows, outputs, self._renderer(name))
            self.stopped[name].update(stopped)
            out += more
        self.round += 1
        if out:
            self.log(f"round {self.round}: {len(out)} later turns, after this run's own answers")
        return out

    def describe(self, rounds: list[int]) -> dict[str, Any]:
        t = self.cfg.temperature
        asked_after = (
            "the evaluated run's own outputs: at temperature 0 a lossless speculative output "
            "is the target's greedy answer"
            if t == 0
            else f"the evaluated run's own samples at temperature {t}: there is no single "
            "target answer, and another run asks the later turns after other answers"
        )
        return {
            "asked_after": asked_after if self.active else None,
            "rounds": rounds,
            "stopped": dict(sum(self.stopped.values(), Counter())),
            "stopped_by_dataset": {name: dict(c) for name, c in sorted(self.stopped.items())},
        }


def _settings(cfg: EvalConfig, result: dict) -> dict[str, Any]:
    return {
        "backend": cfg.backend,
        "k": cfg.k,
        "decoding": "chain" if cfg.topk == 1 else "tree",
        "topk": cfg.topk,
        "num_draft_tokens": cfg.num_draft_tokens or cfg.k,
        "temperature": cfg.temperature,
        "batch_size": result.pop("batch_size", 1),
        "max_new_tokens": cfg.max_new_tokens,
        "prompts": sum(result["follow_ups"]["rounds"]),
        "metric": METRIC,
    }


def _run_fields(run: EvalRun) -> dict[str, Any]:
    return {f.name: getattr(run, f.name) for f in fields(EvalRun)}


def run_eval(cfg: EvalConfig, log: Callable[[str], None] = print) -> EvalResult:
    """The eval of `cfg` (`to_dict()` is the `--json` file)."""
    if cfg.bench:
        return run_bench_eval(cfg, log)
    prompts = eval_prompts.load_prompts(cfg.input, cfg.limit)
    if not prompts:
        raise EyasError("no_input", f"no prompts in {cfg.input}")
    run = _dispatch(cfg, prompts, log)
    return EvalResult(
        **_run_fields(run),
        target=str(cfg.target),
        drafter=str(cfg.drafter),
        eyas_version=__version__,
    )


# -- the model-card table ----------------------------------------------------------------------


def _configs(cfg: EvalConfig) -> list[tuple[str, dict]]:
    """(label, overrides) to run: the published configuration and the user's, once each."""
    user = {"k": cfg.k, "topk": cfg.topk, "num_draft_tokens": cfg.num_draft_tokens or cfg.k}
    if not _sets_drafts(cfg):
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


def _sets_drafts(cfg: EvalConfig) -> bool:
    """Whether the run's draft settings (k, topk) reach the measurement: offline eyas decodes
    itself; a served engine says so (`Acceptance.follows_settings`)."""
    from eyas.backends.registry import ENGINES, acceptance

    return ENGINES[cfg.backend].acceptance is None or acceptance(cfg.backend).follows_settings


def run_bench_eval(cfg: EvalConfig, log: Callable[[str], None] = print) -> EvalResult:
    """Every benchmark of `cfg.bench` at the published and the user's configuration, each in
    its own rounds (later turns asked after that configuration's own outputs)."""
    from eyas.benchmarks import benchmark_prompts, resolve
    from eyas.render.probe import probe_template
    from eyas.render.renderer import Renderer

    benches = resolve(cfg.bench)
    base = Renderer(cfg.target, trust_remote_code=cfg.trust_remote_code)
    fmt = base.model_format
    modes: list[bool | None] = [True, False] if fmt.thinking_key else [None]
    sets, prompts, renderers = [], [], {}
    for mode in modes:
        renderer = base.with_thinking(mode)
        probe = probe_template(renderer)
        for bench in benches:
            s = benchmark_prompts(bench, renderer, limit=cfg.limit, probe=probe)
            renderers[s.dataset] = renderer
            sets.append(s)
            prompts += s.prompts
            log(
                f"{s.dataset}: {len(s.prompts)} prompts from {s.rows} rows"
                + (f"; rejected {dict(s.rejected)}" if s.rejected else "")
            )
    if not prompts:
        raise EyasError(
            "no_prompts",
            "no benchmark row renders with this template: "
            + "; ".join(f"{s.dataset}: {dict(s.rejected)}" for s in sets),
        )
    runs: dict[str, EvalRun] = {}
    for label, overrides in _configs(cfg):
        run_cfg = cfg.model_copy(update=overrides)
        log(f"measuring at {label}")
        runs[label] = _dispatch(run_cfg, prompts, log, renderers=renderers)
    mine = runs[list(runs)[-1]]
    card = _card(sets, runs, fmt.thinking_key)
    return EvalResult(
        **{
            **_run_fields(mine),
            "lossless": card.lossless,
            "lossless_mismatches": sorted(
                {m for r in runs.values() for m in r.lossless_mismatches}
            ),
        },
        model_card=card,
        runs=runs,
        target=str(cfg.target),
        drafter=str(cfg.drafter),
        eyas_version=__version__,
    )


def _card(sets, runs: dict[str, EvalRun], thinking_key: str | None) -> ModelCard:
    """One row per benchmark set; its prompts (every round) and the conversations that
    stopped early are the user's configuration's (the last run)."""
    mine = runs[list(runs)[-1]]
    rows = []
    for s in sets:
        evaluated = mine.datasets.get(s.dataset)
        per_config = {label: res.datasets.get(s.dataset) for label, res in runs.items()}
        rows.append(
            CardRow(
                benchmark=s.benchmark,
                thinking=None if s.thinking is None else ("on" if s.thinking else "off"),
                rows=s.rows,
                prompts=evaluated.prompts if evaluated else 0,
                rejected=dict(s.rejected),
                follow_ups_stopped=mine.follow_ups.stopped_by_dataset.get(s.dataset) or {},
                acceptance_length={
                    label: d.acceptance_length if d else None for label, d in per_config.items()
                },
                mean_accepted_drafts={
                    label: d.mean_accepted_drafts if d else None for label, d in per_config.items()
                },
            )
        )
    lossless = [r.lossless for r in runs.values()]
    verdict = False if False in lossless else (None if None in lossless else True)
    return ModelCard(
        configurations=list(runs),
        published_configuration=PUBLISHED_LABEL,
        metric=METRIC,
        thinking_switch=thinking_key,
        follow_ups_asked_after=mine.follow_ups.asked_after,
        rows=rows,
        lossless=verdict,
        reasons=dict(sum((Counter(s.rejected) for s in sets), Counter())),
    )
