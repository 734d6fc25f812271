"""`eyas audit` and `eyas show`: what the audit's checks and its gate read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from eyas.config import Profile
from eyas.options import Strict as _Strict


class AuditOptions(_Strict):
    """What the audit's checks and its gate read."""

    max_len: int | None = Field(
        None, ge=1, description="planned training/serving length (default: the model's context)"
    )
    truncation_error_rate: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of outputs cut at max_new_tokens (loops aside) that is an error "
        "(95% lower bound)",
    )
    decode_sample: Annotated[int, Field(ge=1)] | Literal["all"] = Field(
        2000, description="samples per dataset for the checks that decode, or all"
    )
    num_examples: int = Field(5, ge=0, description="example ids kept per finding")
    max_quarantine: float = Field(
        0.05,
        ge=0,
        le=1,
        description="fail when a dataset quarantines more than this share (95% lower bound)",
    )

    @field_validator("decode_sample", mode="before")
    @classmethod
    def _count_or_all(cls, v: Any) -> Any:
        if isinstance(v, str) and v != "all" and not v.strip().isdigit():
            raise ValueError(f"takes a count or 'all', not {v!r}")
        return v

    @property
    def decode_limit(self) -> int | None:
        """`decode_sample` as a count; None: every sample."""
        return None if self.decode_sample == "all" else self.decode_sample


class AuditConfig(AuditOptions):
    """`eyas audit DATA`."""

    path_keys: ClassVar = ("input", "model", "json_out", "html_out", "quarantine")
    input_keys: ClassVar = ("input", "model")

    input: Path = Field(description="stage dir, run dir, Parquet or sample JSONL")
    model: Path | None = Field(None, description="model dir (tokenizer + template)")
    profile: Profile = Field(None, description="model format (default: detected)")
    trust_remote_code: bool = Field(False, description="let transformers run the model's code")
    json_out: Path | None = Field(None, description="write the findings as JSON")
    html_out: Path | None = Field(None, description="write a self-contained HTML report")
    quarantine: Path | None = Field(
        None,
        description="where the quarantine list goes (default: beside the data, where "
        "training looks for it)",
    )
    allow_incomplete: bool = Field(False, description="exit 0 when checks were skipped")

    def options(self) -> AuditOptions:
        return AuditOptions(**self.model_dump(include=set(AuditOptions.model_fields)))


class ShowConfig(_Strict):
    """`eyas show DATA ID`."""

    path_keys: ClassVar = ("data", "model")
    input_keys: ClassVar = ("data", "model")

    data: Path = Field(description="stage dir, run dir, Parquet or sample JSONL")
    id: str = Field(description="sample id (a unique prefix is enough)")
    model: Path | None = Field(None, description="model dir (default: from the manifest)")
