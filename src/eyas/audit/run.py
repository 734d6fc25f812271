"""`eyas audit INPUT [--model DIR] [--json F] [--html F]`: run every check per dataset.

Exit code 1 when any error-severity finding exists (the gate), 0 otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eyas import __version__
from eyas.audit.checks import CHECKS, NEEDS_MODEL, NEEDS_TOKENIZER
from eyas.audit.context import AuditContext, AuditOptions, Finding
from eyas.audit.data import SampleTable, load_table
from eyas.render.profiles import PROFILES, detect_profile, get_profile


@dataclass
class AuditResult:
    table: SampleTable
    findings: list[Finding]
    profile: str
    skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def num_errors(self) -> int:
        return sum(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        datasets = {}
        for f in self.findings:
            if f.check == "length":
                datasets[f.dataset] = {"samples": f.total, **f.data}
        return {
            "eyas_version": __version__,
            "input": self.table.source,
            "profile": self.profile,
            "num_samples": len(self.table),
            "passed": self.num_errors == 0,
            "errors": self.num_errors,
            "warnings": sum(f.severity == "warning" for f in self.findings),
            "skipped_checks": self.skipped,
            "seconds": round(self.seconds, 2),
            "datasets": datasets,
            "findings": [f.to_dict() for f in self.findings],
        }


def _model_dir_from_manifest(table: SampleTable) -> Path | None:
    model_dir = (table.manifest.get("render") or {}).get("model_dir")
    return Path(model_dir) if model_dir and Path(model_dir).exists() else None


def run_audit(
    input: str | Path,
    model_dir: str | Path | None = None,
    options: AuditOptions | None = None,
    profile: str | None = None,
    trust_remote_code: bool = False,
) -> AuditResult:
    start = time.perf_counter()
    options = options or AuditOptions()
    table = load_table(input)
    renderer = tokenizer = probe = None
    model = Path(model_dir) if model_dir else _model_dir_from_manifest(table)
    if model is not None:
        from eyas.render.probe import probe_template
        from eyas.render.renderer import Renderer

        thinking = (table.manifest.get("render") or {}).get("template_kwargs") or {}
        renderer = Renderer(model, profile, None, trust_remote_code)
        renderer.template_kwargs = dict(thinking) or renderer.template_kwargs
        tokenizer = renderer.tokenizer
        prof = renderer.profile
        probe = probe_template(renderer)
        if options.max_len is None:
            config = model / "config.json"
            if config.exists():
                import json

                options.max_len = json.loads(config.read_text()).get("max_position_embeddings")
    else:
        prof = get_profile(profile) if profile else PROFILES["generic"]
    if tokenizer is not None and profile is None:
        prof = detect_profile(tokenizer) if renderer is None else renderer.profile
    ctx = AuditContext(table, prof, options, tokenizer, renderer, probe)
    skipped = []
    if tokenizer is None:
        skipped = sorted(NEEDS_TOKENIZER | NEEDS_MODEL)
    findings: list[Finding] = []
    for dataset, idx in table.by_dataset().items():
        for name, check in CHECKS.items():
            if name in skipped:
                continue
            findings.extend(check(ctx, dataset, idx))
    for name in skipped:
        findings.append(
            Finding(
                name,
                "info",
                "*",
                0,
                len(table),
                [],
                "skipped: needs the model's tokenizer (pass --model DIR)",
            )
        )
    return AuditResult(table, findings, prof.name, skipped, time.perf_counter() - start)
