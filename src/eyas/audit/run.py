"""`eyas audit INPUT [--model DIR] [--json F] [--html F] [--quarantine F]`: run every check on
every dataset, quarantine the bad samples, and gate.

Verdicts and exit codes:
- PASS (0): no systemic error and every dataset's quarantined share within `--max-quarantine`;
  per-sample errors are quarantined (training skips them) without failing the run.
- FAIL (1): a systemic error (a template that ignores tools, a lossy backend, mismatched
  fingerprints, a whole dataset rendered wrongly), or a dataset quarantining too much.
- INCOMPLETE (3): checks were skipped for want of a tokenizer (pass `--model DIR`, or
  `--allow-incomplete` to accept the partial audit).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from eyas import __version__
from eyas.audit import checks_data, checks_output, checks_prompt  # noqa: F401 - registration
from eyas.audit.check import CHECKS, SEVERITY_ORDER, Finding, Hit, Systemic, share_lower_bound
from eyas.audit.context import AuditContext, AuditOptions
from eyas.errors import EyasError
from eyas.formats import MODEL_FORMATS, get_model_format
from eyas.store import SampleTable, load_table

EXIT_CODES = {"PASS": 0, "FAIL": 1, "INCOMPLETE": 3}


@dataclass(frozen=True)
class LengthStats:
    """Token lengths of one dataset's prompts or outputs (`checks_data.length_stats`; all zero
    for a dataset without samples)."""

    median: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: int = 0
    mean: float = 0.0
    share_under_500: float = 0.0
    histogram_counts: tuple[int, ...] = ()
    histogram_edges: tuple[float, ...] = ()

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LengthStats:
        hist = d.get("histogram") or {}
        scalars = {k: d[k] for k in ("median", "p90", "p99", "max", "mean", "share_under_500")}
        return cls(
            **(scalars if d else {}),
            histogram_counts=tuple(hist.get("counts", ())),
            histogram_edges=tuple(hist.get("edges", ())),
        )


@dataclass(frozen=True)
class DatasetProfile:
    """One dataset's `datasets.<name>` entry of the audit report, typed: its samples, the share
    quarantined, the length distributions and the finish reasons."""

    samples: int
    quarantined_share: float
    prompt: LengthStats
    output: LengthStats
    finish_reasons: dict[str, int]
    at_cap: int  # outputs that stopped exactly at max_new_tokens
    source_chars_median: float | None = None  # with a tokenizer: the source's assistant turns
    output_chars_median: float | None = None


@dataclass
class AuditResult:
    table: SampleTable
    findings: list[Finding]
    profile: str
    quarantine: list[dict] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # check -> what it lacked
    seconds: float = 0.0
    max_quarantine: float = 0.05

    @property
    def num_errors(self) -> int:
        """Systemic error findings: these fail the gate."""
        return sum(f.severity == "error" and f.systemic for f in self.findings)

    @property
    def verdict(self) -> str:
        if self.num_errors:
            return "FAIL"
        return "INCOMPLETE" if self.skipped else "PASS"

    def exit_code(self, allow_incomplete: bool = False) -> int:
        if self.verdict == "INCOMPLETE" and allow_incomplete:
            return 0
        return EXIT_CODES[self.verdict]

    def quarantined_share(self) -> dict[str, float]:
        totals = defaultdict(int)
        for name in self.table.dataset:
            totals[name] += 1
        counts = defaultdict(set)
        for row in self.quarantine:
            counts[row["dataset"]].add(row["id"])
        return {d: round(len(counts[d]) / n, 4) for d, n in sorted(totals.items())}

    def dataset_profiles(self) -> dict[str, DatasetProfile]:
        """The report's `datasets` entries as typed profiles (what `to_dict` writes)."""
        return {
            name: DatasetProfile(
                samples=d["samples"],
                quarantined_share=d["quarantined_share"],
                prompt=LengthStats.from_dict(d["prompt"]),
                output=LengthStats.from_dict(d["output"]),
                finish_reasons=dict(d["finish_reasons"]),
                at_cap=d["at_cap"],
                source_chars_median=d.get("source_chars_median"),
                output_chars_median=d.get("output_chars_median"),
            )
            for name, d in self.to_dict()["datasets"].items()
        }

    def to_dict(self) -> dict[str, Any]:
        datasets = {}
        shares = self.quarantined_share()
        for f in self.findings:
            if f.check == "length" and f.reason == "distribution":
                datasets[f.dataset] = {
                    "samples": f.total,
                    "quarantined_share": shares.get(f.dataset, 0.0),
                    **f.data,
                }
        return {
            "eyas_version": __version__,
            "input": self.table.source,
            "profile": self.profile,
            "num_samples": len(self.table),
            # rows of an id that two jobs writing one folder both committed (kept once)
            "duplicates_dropped": self.table.duplicates,
            "verdict": self.verdict,
            "passed": self.verdict == "PASS",
            "errors": self.num_errors,
            "sample_errors": sum(f.count for f in self.findings if f.severity == "error"),
            "warnings": sum(f.severity == "warning" for f in self.findings),
            "quarantined": len({r["id"] for r in self.quarantine}),
            "max_quarantine": self.max_quarantine,
            "skipped_checks": self.skipped,
            "seconds": round(self.seconds, 2),
            "datasets": datasets,
            "findings": [f.to_dict() for f in self.findings],
        }


def _model_dir_from_manifest(table: SampleTable) -> Path | None:
    model_dir = (table.manifest.get("render") or {}).get("model_dir")
    return Path(model_dir) if model_dir and Path(model_dir).exists() else None


def _context(
    table: SampleTable,
    model_dir: str | Path | None,
    options: AuditOptions,
    profile: str | None,
    trust_remote_code: bool,
) -> AuditContext:
    render = table.manifest.get("render") or {}
    model = Path(model_dir) if model_dir else _model_dir_from_manifest(table)
    if model is None:
        fmt = get_model_format(profile or render.get("profile") or "generic")
        # the stage manifest records the stop ids the data was generated with
        stop_ids = set(render.get("stop_token_ids") or [])
        return AuditContext(table, fmt, options, stop_ids=stop_ids)
    from eyas.render.probe import probe_template
    from eyas.render.renderer import Renderer

    renderer = Renderer(model, profile, None, trust_remote_code)
    renderer.template_kwargs = dict(render.get("template_kwargs") or renderer.template_kwargs)
    if options.max_len is None and (model / "config.json").exists():
        from eyas.hf_models import target_model

        with contextlib.suppress(EyasError):  # a tokenizer-only dir has no model dimensions
            options.max_len = target_model(model).context_length
    return AuditContext(
        table,
        renderer.model_format,
        options,
        renderer.tokenizer,
        renderer,
        probe_template(renderer),
    )


def _aggregate(
    ctx: AuditContext, check_name: str, dataset: str, idx: np.ndarray, items: list
) -> list[Finding]:
    check = CHECKS[check_name]
    checked = len(ctx.sample_of(idx)) if check.sampled else len(idx)
    note = f" (checked a sample of {checked} of {len(idx)})" if checked < len(idx) else ""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    details: dict[int, str] = {}
    findings = []
    for item in items:
        if isinstance(item, Systemic):
            findings.append(
                Finding(
                    check_name,
                    item.severity,
                    item.reason,
                    dataset,
                    item.count,
                    item.total or len(idx),
                    item.examples,
                    item.message,
                    systemic=True,
                    data=item.data,
                )
            )
        else:
            groups[(item.severity, item.reason)].append(item.index)
            if item.detail:
                details[item.index] = item.detail
    for (severity, reason), rows in groups.items():
        rows = sorted(set(rows))
        shown = rows[: ctx.options.num_examples]
        found = {ctx.table.ids[i]: details[i] for i in shown if i in details}
        findings.append(
            Finding(
                check_name,
                severity,
                reason,
                dataset,
                len(rows),
                checked,
                [ctx.table.ids[i] for i in shown],
                check.reasons.get(reason, reason) + note,
                data={"details": found} if found else {},
            )
        )
    return findings


def run_audit(
    input: str | Path,
    model_dir: str | Path | None = None,
    options: AuditOptions | None = None,
    profile: str | None = None,
    trust_remote_code: bool = False,
) -> AuditResult:
    start = time.perf_counter()
    options = options or AuditOptions()
    if profile is not None and profile not in MODEL_FORMATS:
        get_model_format(profile)  # raises with the list of names
    table = load_table(input)
    ctx = _context(table, model_dir, options, profile, trust_remote_code)
    skipped = {
        name: ", ".join(sorted(n for n in check.needs if not ctx.available(n)))
        for name, check in CHECKS.items()
        if not all(ctx.available(n) for n in check.needs)
    }
    findings: list[Finding] = []
    quarantine: dict[str, dict] = {}
    for dataset, idx in table.by_dataset().items():
        for name, check in CHECKS.items():
            if name in skipped:
                continue
            items = list(check.run(ctx, dataset, idx))
            findings += _aggregate(ctx, name, dataset, idx, items)
            for hit in items:
                if isinstance(hit, Hit) and hit.severity == "error":
                    sid = table.ids[hit.index]
                    quarantine.setdefault(
                        sid,
                        {
                            "id": sid,
                            "dataset": dataset,
                            "check": name,
                            "severity": "error",
                            "reason": hit.reason,
                            **({"detail": hit.detail} if hit.detail else {}),
                        },
                    )
        findings += _gate(table, dataset, idx, findings, quarantine, options)
    for name, lacking in skipped.items():
        findings.append(
            Finding(
                name,
                "info",
                "skipped",
                "*",
                0,
                len(table),
                [],
                f"skipped: needs {lacking} (pass --model DIR)",
                systemic=True,
            )
        )
    findings.sort(key=lambda f: (SEVERITY_ORDER[f.severity], f.dataset, f.check, f.reason))
    result = AuditResult(
        table,
        findings,
        ctx.model_format.name,
        list(quarantine.values()),
        skipped,
        time.perf_counter() - start,
        options.max_quarantine,
    )
    return result


def _gate(
    table: SampleTable,
    dataset: str,
    idx: np.ndarray,
    findings: list[Finding],
    quarantine: dict[str, dict],
    options: AuditOptions,
) -> list[Finding]:
    """A dataset that quarantines more than `max_quarantine` of its samples is not a few bad
    generations but a systematic fault: promote it to a systemic error, named after the checks
    that quarantined the most.

    "More than" means the 95% lower confidence bound of the quarantined share (Wilson) is over
    the limit, not the raw share: 2 bad samples of 37 (5.4%) are a few bad generations, 5,400 of
    100,000 are a fault."""
    rows = [r for r in quarantine.values() if r["dataset"] == dataset]
    total = max(1, len(idx))
    if share_lower_bound(len(rows), total) <= options.max_quarantine:
        return []
    by_check = defaultdict(int)
    for r in rows:
        by_check[r["check"]] += 1
    out = []
    for check, n in sorted(by_check.items(), key=lambda kv: -kv[1]):
        if share_lower_bound(n, total) <= options.max_quarantine and out:
            continue
        reasons = sorted({f.reason for f in findings if f.check == check and f.dataset == dataset})
        out.append(
            Finding(
                check,
                "error",
                "quarantine_share",
                dataset,
                n,
                len(idx),
                [r["id"] for r in rows if r["check"] == check][: options.num_examples],
                f"{n / len(idx):.1%} of {dataset} quarantined by {check} ({', '.join(reasons)}; "
                f"95% lower bound {share_lower_bound(n, total):.1%}): over the "
                f"{options.max_quarantine:.0%} limit, the whole dataset is suspect",
                systemic=True,
            )
        )
    return out
