"""The typed result of `eyas eval` (`run_eval`, `run_bench_eval`).

The evaluators (offline, served, an engine's own) return the documented dict; `run_eval`
reads it into these classes once, and the CLI, the reports and the quickstart read attributes.
`to_dict()` writes the `--json` file, key for key and in the same order as the dict results it
replaces; `from_dict(to_dict())` gives the same object back.

Backend-only parts are typed and `None` when the backend has none: `offline` (what the local
evaluator measured beside acceptance) and `served` (the lossless check against the baseline
engine, throughput, the servers and the requests). A served backend's figures may add its own
accept length (`sglang_accept_length`, SGLang counts the prefill token) and have no histogram.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Figures:
    """Acceptance figures of a dataset or the whole run (`eyas.evaluate.metrics`)."""

    verify_steps: int
    acceptance_length: float
    mean_accepted_drafts: float
    per_position: list[float]
    histogram: list[int] | None
    sglang_accept_length: float | None = None  # SGLang only: prefill token counted
    # P(draft i accepted), the model cards' per-position rate; None where the backend has no
    # per-position counts (SGLang) or the result was written before eyas reported it
    acceptance_rate_per_position: list[float] | None = None

    def figures_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verify_steps": self.verify_steps,
            "acceptance_length": self.acceptance_length,
            "mean_accepted_drafts": self.mean_accepted_drafts,
        }
        if self.sglang_accept_length is not None:
            out["sglang_accept_length"] = self.sglang_accept_length
        out["per_position"] = list(self.per_position)
        if self.acceptance_rate_per_position is not None:
            out["acceptance_rate_per_position"] = list(self.acceptance_rate_per_position)
        out["histogram"] = None if self.histogram is None else list(self.histogram)
        return out

    @staticmethod
    def figures_kwargs(d: Mapping[str, Any]) -> dict[str, Any]:
        hist = d.get("histogram")
        rates = d.get("acceptance_rate_per_position")
        return {
            "verify_steps": int(d["verify_steps"]),
            "acceptance_length": float(d["acceptance_length"]),
            "mean_accepted_drafts": float(d["mean_accepted_drafts"]),
            "per_position": [float(p) for p in d.get("per_position") or []],
            "histogram": None if hist is None else [int(h) for h in hist],
            "sglang_accept_length": d.get("sglang_accept_length"),
            "acceptance_rate_per_position": None if rates is None else [float(r) for r in rates],
        }


@dataclass(frozen=True, kw_only=True)
class DatasetFigures(Figures):
    """One dataset's figures, summed over every round; `prompts` counts its prompts."""

    prompts: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.figures_dict(), "prompts": self.prompts}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DatasetFigures:
        return cls(**cls.figures_kwargs(d), prompts=int(d["prompts"]))


@dataclass(frozen=True, kw_only=True)
class CategoryFigures(Figures):
    """One category's figures (`eyas.evaluate.categories`): its datasets' counts summed."""

    prompts: int
    datasets: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {**self.figures_dict(), "prompts": self.prompts, "datasets": list(self.datasets)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CategoryFigures:
        return cls(**cls.figures_kwargs(d), prompts=int(d["prompts"]), datasets=list(d["datasets"]))


@dataclass(frozen=True)
class EvalSettings:
    """The settings every number was measured at."""

    backend: str
    k: int
    decoding: str  # "chain" or "tree"
    topk: int
    num_draft_tokens: int
    temperature: float
    batch_size: int
    max_new_tokens: int
    prompts: int  # every round's
    metric: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalSettings:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class FollowUpsInfo:
    """The rounds: each round's prompt count, what later turns were asked after, and the
    conversations that stopped early (per reason, and per dataset)."""

    asked_after: str | None
    rounds: list[int]
    stopped: dict[str, int]
    stopped_by_dataset: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "asked_after": self.asked_after,
            "rounds": list(self.rounds),
            "stopped": dict(self.stopped),
            "stopped_by_dataset": {k: dict(v) for k, v in self.stopped_by_dataset.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FollowUpsInfo:
        return cls(
            d.get("asked_after"),
            list(d["rounds"]),
            dict(d["stopped"]),
            {k: dict(v) for k, v in d["stopped_by_dataset"].items()},
        )


@dataclass(frozen=True)
class OfflineDetails:
    """What the offline (local) evaluator reports beside acceptance."""

    seconds: float
    output_tokens: int
    method: str
    aux_layers_hf: list[int]
    aux_layer_rule: str | None

    KEYS = ("seconds", "output_tokens", "method", "aux_layers_hf", "aux_layer_rule")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.KEYS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OfflineDetails:
        return cls(
            float(d["seconds"]),
            int(d["output_tokens"]),
            str(d["method"]),
            list(d["aux_layers_hf"]),
            d.get("aux_layer_rule"),
        )


@dataclass(frozen=True)
class PromptDivergence:
    id: str
    first_divergence: int | None
    token_match_rate: float
    baseline_first_divergence: int | None


@dataclass(frozen=True)
class LosslessCheck:
    """The served check against the same engine without a drafter, run twice; `note` alone
    (and the rest None) when no check ran, saying why."""

    note: str | None = None
    compared_with: str | None = None
    rule: str | None = None
    prompts: int | None = None
    prompts_diverged: int | None = None
    baseline_prompts_diverged: int | None = None
    match_rate: float | None = None
    per_prompt: list[PromptDivergence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        if self.compared_with is None:
            return {"note": self.note}
        return {
            "compared_with": self.compared_with,
            "rule": self.rule,
            "prompts": self.prompts,
            "prompts_diverged": self.prompts_diverged,
            "baseline_prompts_diverged": self.baseline_prompts_diverged,
            "match_rate": self.match_rate,
            "per_prompt": [dict(p.__dict__) for p in self.per_prompt],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LosslessCheck:
        if "compared_with" not in d:
            return cls(note=d.get("note"))
        return cls(
            compared_with=d["compared_with"],
            rule=d["rule"],
            prompts=d["prompts"],
            prompts_diverged=d["prompts_diverged"],
            baseline_prompts_diverged=d["baseline_prompts_diverged"],
            match_rate=d["match_rate"],
            per_prompt=[PromptDivergence(**p) for p in d["per_prompt"]],
        )


@dataclass(frozen=True)
class Throughput:
    output_tokens_per_s: float
    baseline_output_tokens_per_s: float | None = None  # with a baseline run
    speedup: float | None = None

    def to_dict(self) -> dict[str, float]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Throughput:
        return cls(
            d["output_tokens_per_s"], d.get("baseline_output_tokens_per_s"), d.get("speedup")
        )

    def __str__(self) -> str:  # the CLI's throughput line prints the dict it writes
        return str(self.to_dict())


@dataclass(frozen=True)
class FailedRequest:
    id: str
    reason: str
    detail: str


@dataclass(frozen=True)
class Requests:
    """The served run's failed requests (kept, with their reasons) and its retries."""

    failed: list[FailedRequest]
    failure_reasons: dict[str, int]
    retries: int
    retry_reasons: dict[str, int]
    baseline_failed: list[FailedRequest]

    def to_dict(self) -> dict[str, Any]:
        return {
            "failed": [dict(f.__dict__) for f in self.failed],
            "failure_reasons": dict(self.failure_reasons),
            "retries": self.retries,
            "retry_reasons": dict(self.retry_reasons),
            "baseline_failed": [dict(f.__dict__) for f in self.baseline_failed],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Requests:
        return cls(
            [FailedRequest(**f) for f in d["failed"]],
            dict(d["failure_reasons"]),
            int(d["retries"]),
            dict(d["retry_reasons"]),
            [FailedRequest(**f) for f in d["baseline_failed"]],
        )


@dataclass(frozen=True)
class ServedDetails:
    """What a served evaluator reports beside acceptance. `servers` is each server's own
    description, as its engine's backend gives it (`ServerPool.info`)."""

    lossless_check: LosslessCheck
    throughput: Throughput
    servers: list[dict[str, Any]]
    requests: Requests
    source: str  # where the acceptance counts were read

    def to_dict(self) -> dict[str, Any]:
        return {
            "lossless_check": self.lossless_check.to_dict(),
            "throughput": self.throughput.to_dict(),
            "servers": list(self.servers),
            "requests": self.requests.to_dict(),
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ServedDetails:
        return cls(
            LosslessCheck.from_dict(d["lossless_check"]),
            Throughput.from_dict(d["throughput"]),
            list(d["servers"]),
            Requests.from_dict(d["requests"]),
            str(d["source"]),
        )


@dataclass(frozen=True, kw_only=True)
class EvalRun(Figures):
    """One configuration's run: the figures over every dataset and round, per dataset, the
    lossless verdict (None: not checked) and the settings."""

    lossless: bool | None
    lossless_mismatches: list[str]
    datasets: dict[str, DatasetFigures]
    follow_ups: FollowUpsInfo
    settings: EvalSettings
    offline: OfflineDetails | None = None
    served: ServedDetails | None = None
    # chat, code, tool_calls, math, other: None in results written before eyas reported them
    categories: dict[str, CategoryFigures] | None = None

    @property
    def throughput(self) -> Throughput | None:
        return self.served.throughput if self.served else None

    def to_dict(self) -> dict[str, Any]:
        out = self.figures_dict()
        verdict = {"lossless": self.lossless, "lossless_mismatches": list(self.lossless_mismatches)}
        datasets = {"datasets": {n: d.to_dict() for n, d in self.datasets.items()}}
        if self.categories is not None:
            datasets["categories"] = {n: c.to_dict() for n, c in self.categories.items()}
        if self.served is not None:  # the served evaluator's order
            out |= datasets | verdict | self.served.to_dict()
        else:
            out |= verdict | datasets
        if self.offline is not None:
            out |= self.offline.to_dict()
        out["follow_ups"] = self.follow_ups.to_dict()
        out["settings"] = self.settings.to_dict()
        return out

    @classmethod
    def run_kwargs(cls, d: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **cls.figures_kwargs(d),
            "lossless": d.get("lossless"),
            "lossless_mismatches": list(d.get("lossless_mismatches") or []),
            "datasets": {n: DatasetFigures.from_dict(x) for n, x in d["datasets"].items()},
            "categories": None
            if d.get("categories") is None
            else {n: CategoryFigures.from_dict(x) for n, x in d["categories"].items()},
            "follow_ups": FollowUpsInfo.from_dict(d["follow_ups"]),
            "settings": EvalSettings.from_dict(d["settings"]),
            "offline": OfflineDetails.from_dict(d) if "method" in d else None,
            "served": ServedDetails.from_dict(d) if "lossless_check" in d else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalRun:
        return cls(**cls.run_kwargs(d))


@dataclass(frozen=True)
class CardRow:
    """One benchmark (and thinking mode) of the model card: AL per configuration label."""

    benchmark: str
    thinking: str | None  # "on", "off", or None without a thinking switch
    rows: int
    prompts: int
    rejected: dict[str, int]
    follow_ups_stopped: dict[str, int]
    acceptance_length: dict[str, float | None]
    mean_accepted_drafts: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CardRow:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ModelCard:
    """`--bench`: acceptance length per benchmark at the published and the user's config."""

    configurations: list[str]
    published_configuration: str
    metric: str
    thinking_switch: str | None
    follow_ups_asked_after: str | None
    rows: list[CardRow]
    lossless: bool | None
    reasons: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["configurations"] = list(self.configurations)
        out["rows"] = [r.to_dict() for r in self.rows]
        out["reasons"] = dict(self.reasons)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelCard:
        kw = {k: d[k] for k in cls.__dataclass_fields__}
        kw["rows"] = [CardRow.from_dict(r) for r in d["rows"]]
        return cls(**kw)


@dataclass(frozen=True, kw_only=True)
class EvalResult(EvalRun):
    """What `run_eval` returns and `eyas eval --json` writes: the user's configuration's run,
    the models, and with `--bench` the model card and every configuration's run."""

    target: str
    drafter: str
    eyas_version: str
    model_card: ModelCard | None = None
    runs: dict[str, EvalRun] | None = None  # --bench: label -> that configuration's run

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        if self.model_card is not None:
            out["model_card"] = self.model_card.to_dict()
        if self.runs is not None:
            out["runs"] = {label: r.to_dict() for label, r in self.runs.items()}
        out |= {"target": self.target, "drafter": self.drafter, "eyas_version": self.eyas_version}
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EvalResult:
        card, runs = d.get("model_card"), d.get("runs")
        return cls(
            **cls.run_kwargs(d),
            target=d["target"],
            drafter=d["drafter"],
            eyas_version=d["eyas_version"],
            model_card=None if card is None else ModelCard.from_dict(card),
            runs=None if runs is None else {k: EvalRun.from_dict(r) for k, r in runs.items()},
        )


__all__ = [
    "CardRow",
    "DatasetFigures",
    "EvalResult",
    "EvalRun",
    "EvalSettings",
    "FailedRequest",
    "Figures",
    "FollowUpsInfo",
    "LosslessCheck",
    "ModelCard",
    "OfflineDetails",
    "PromptDivergence",
    "Requests",
    "ServedDetails",
    "Throughput",
]
