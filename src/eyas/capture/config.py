"""`eyas capture`: target hidden states for drafter training, through a serving engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from eyas import config_legacy
from eyas.backends.server_config import ServerConfig
from eyas.backends.server_config import server_defaults as _server_defaults
from eyas.config import (
    AuxLayers,
    CaptureEngine,
    DrafterMethod,
    EngineSettings,
    check_shard,
    engine_input,
    served_needs_urls,
    server_input,
)
from eyas.drafter.names import DEFAULT_METHOD
from eyas.options import Strict as _Strict


class CaptureConfig(_Strict):
    """`eyas capture`: target hidden states for drafter training, through a serving engine."""

    path_keys: ClassVar = (
        "target",
        "data",
        "out",
        "engine.python",
        "quarantine",
        "storage_dir",
        "server.url_file",
        "url_file",  # the old key (moved to server.url_file)
        "vllm_python",  # the old key (moved to engine.python)
    )
    input_keys: ClassVar = ("target", "data", "engine.python", "quarantine")

    target: Path = Field(description="target model directory")
    data: Path = Field(description="generate stage dir, Parquet or sample JSONL")
    out: Path = Field(description="capture output directory (shards + manifest)")
    backend: CaptureEngine = Field("local", description="where the target runs")
    server: ServerConfig = Field(
        default_factory=_server_defaults(concurrency=8, ready_timeout_s=300.0, max_attempts=4),
        description="the capture servers and how they are asked",
    )
    engine: EngineSettings = Field(
        description="the options of the engine `backend` names (its package's options)"
    )
    storage_dir: Path | None = Field(
        None,
        description="the server's shared_storage_path (where it writes per-request files; "
        "default: OUT/.incoming, used when eyas starts the server)",
    )
    method: DrafterMethod = Field(
        DEFAULT_METHOD,
        description="the drafter method the capture trains: its fused layers are captured "
        "(eagle3 and eagle3.1: SGLang's [2, N/2, N-3]; dflash, dflash2: their own spread)",
    )
    aux_layers: AuxLayers = Field(
        None, description="aux layer ids (default: the method's, see --method)"
    )
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="stored state dtype")
    shard_size: int = Field(64, ge=1, description="samples per committed shard")
    max_len: int | None = Field(None, ge=8, description="skip longer sequences (recorded)")
    truncated: Literal["train", "skip"] = Field(
        "train", description="cut outputs that are not loops: capture them or skip them"
    )
    quarantine: Path | None = None
    include_quarantined: bool = False
    force: bool = Field(False, description="capture even when the disk looks too small")
    limit: int | None = Field(None, ge=1, description="capture at most this many samples")
    shard: str = Field("0/1", description="i/n: this job's slice of ids (sha256 of the id)")
    dry_run: bool = Field(
        False, description="print the samples, tokens and storage still to capture, and stop"
    )
    trust_remote_code: bool = False

    @field_validator("shard")
    @classmethod
    def _shard(cls, v: str) -> str:
        return check_shard(v)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        data = server_input(cls, config_legacy.renamed_keys(data, "capture"), "capture")
        if not isinstance(data, dict):
            return data
        kind = data.get("backend", cls.model_fields["backend"].default)
        return engine_input(data, kind, "capture")

    @model_validator(mode="after")
    def _server(self) -> CaptureConfig:
        if why := served_needs_urls(self.backend, self.server, self.engine):
            raise ValueError(why)
        return self
