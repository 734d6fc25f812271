"""`eyas export drafter|check|samples`: the layouts and trainers an export is for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from eyas import config_legacy
from eyas.options import Strict as _Strict

# the drafter layouts `eyas export drafter` writes (eyas.export.drafter)
ExportFormat = Literal["sglang", "vllm"]
# the trainers `eyas export samples` writes for (eyas.export.samples)
SampleFormat = Literal["specforge", "speculators"]


class ExportDrafterConfig(_Strict):
    """`eyas export drafter`."""

    path_keys: ClassVar = ("checkpoint", "out", "target")
    input_keys: ClassVar = ("checkpoint", "target")

    checkpoint: Path = Field(description="`eyas train --out` dir, its drafter/ dir, or an export")
    format: ExportFormat = Field(description="the serving engine's layout")
    out: Path = Field(description="export directory")
    step: int | None = Field(None, ge=0, description="export checkpoint step N instead")
    target: Path | None = Field(None, description="target dir (default: from training)")
    speculative_tokens: int = Field(3, ge=1, description="vllm: draft tokens per step")
    engine_version: str | None = Field(
        None,
        description="the serving engine's version, where the layout depends on it "
        "(sglang: EAGLE-3.1 needs 0.5.12 or later)",
    )

    @field_validator("engine_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        from packaging.version import InvalidVersion, Version

        try:
            return None if v is None else str(Version(v))
        except InvalidVersion:
            raise ValueError(f"engine_version takes a version such as 0.5.23, not {v!r}") from None


class ExportCheckConfig(_Strict):
    """`eyas export check PATH`."""

    path_keys: ClassVar = ("path", "target", "engine_python")
    input_keys: ClassVar = ("path", "target", "engine_python")

    path: Path = Field(description="an exported drafter directory")
    target: Path | None = Field(None, description="target dir (default: from the export)")
    engine: ExportFormat | None = Field(
        None, description="the engine that will load it: refuse or warn on the other's layout"
    )
    engine_python: Path | None = Field(
        None,
        description="python of the engine's install whose own loader builds the drafter "
        "(default: this python if it imports the engine, else eyas's restatement of the loader)",
    )

    @model_validator(mode="before")
    @classmethod
    def _old_key(cls, data: Any) -> Any:
        return config_legacy.renamed_keys(data, "export check")


class ExportSamplesConfig(_Strict):
    """`eyas export samples DATA`."""

    path_keys: ClassVar = ("input", "out", "quarantine")
    input_keys: ClassVar = ("input", "quarantine")

    input: Path = Field(description="stage dir, Parquet or sample JSONL")
    format: SampleFormat = Field(description="the trainer that reads the samples")
    out: Path = Field(description="output JSONL")
    truncated: Literal["train", "skip"] = Field(
        "train", description="cut outputs that are not loops: export them or skip them"
    )
    quarantine: Path | None = Field(
        None, description="audit quarantine list (default: the one beside the data, if any)"
    )
    include_quarantined: bool = Field(False, description="export quarantined samples too")

    @model_validator(mode="before")
    @classmethod
    def _old_key(cls, data: Any) -> Any:
        return config_legacy.renamed_keys(data, "export samples")
