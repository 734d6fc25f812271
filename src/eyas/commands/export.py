"""`eyas` export drafter, check and samples."""

from __future__ import annotations

from pathlib import Path

from eyas.cli_schema import Arg, Flag, schema_flags
from eyas.commands.common import INCLUDE_TRUNCATED, console, user_errors
from eyas.export.config import ExportCheckConfig, ExportDrafterConfig, ExportSamplesConfig


def _given_target(target: Path | None) -> None:
    """A --target the user gave is a model directory (the checks it enables are not skipped)."""
    if target is not None:
        from eyas.hf_models import model_config

        model_config(target)


@user_errors
@schema_flags(
    ExportDrafterConfig,
    "checkpoint",
    "format",
    "out",
    "step",
    "target",
    "speculative_tokens",
    "engine_version",
)
def export_drafter_cmd(cfg: ExportDrafterConfig) -> None:
    """Export a drafter for SGLang or vLLM, then validate it."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export

    _given_target(cfg.target)
    path = export_drafter(
        cfg.checkpoint,
        cfg.format,
        cfg.out,
        cfg.target,
        cfg.speculative_tokens,
        cfg.step,
        engine_version=cfg.engine_version,
    )
    console.print(f"{cfg.format} export -> {path}; validated: {check_export(path, cfg.target)}")


@user_errors
@schema_flags(
    ExportCheckConfig,
    Arg("path"),
    "target",
    "engine",
    "engine_python",
    Flag("engine_python", "--vllm-python", now="--engine-python"),
)
def export_check_cmd(cfg: ExportCheckConfig) -> None:
    """Validate an exported drafter (tensors, shapes, dtypes, embedding, aux ids, positions;
    with --engine, that this engine reads its layout as the drafter was trained; vLLM's own
    loader builds a vLLM export where vLLM is importable)."""
    from eyas.export.validate import check_export, find_engine_python

    _given_target(cfg.target)
    summary = check_export(cfg.path, cfg.target, cfg.engine, find_engine_python(cfg.engine_python))
    for warning in summary.get("warnings", []):
        console.print(f"warning: {warning}")
    console.print(summary)


@user_errors
@schema_flags(
    ExportSamplesConfig,
    Arg("input"),
    "format",
    "out",
    "truncated",
    INCLUDE_TRUNCATED,
    "quarantine",
    "include_quarantined",
)
def export_samples_cmd(cfg: ExportSamplesConfig) -> None:
    """Write the samples that would train for SpecForge or speculators (ids and masks intact)."""
    from eyas.export.samples import export_samples

    console.print(
        export_samples(
            cfg.input,
            cfg.format,
            cfg.out,
            cfg.truncated,
            cfg.quarantine,
            cfg.include_quarantined,
        )
    )
