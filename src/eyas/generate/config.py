"""`eyas prepare` and `eyas generate`: the pipeline config (the model, the engine and its
servers, sampling, the datasets), loaded from a pipeline TOML."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from eyas.backends.server_config import ServerConfig
from eyas.config import (
    EngineSettings,
    GenerateEngine,
    ModelConfig,
    SamplingConfig,
    SourceFormat,
    build_config,
    check_shard,
    engine_input,
)
from eyas.options import Strict as _Strict


class BackendConfig(ServerConfig):
    """`eyas generate`'s engine and its servers: the engine's name (`kind`) and the
    `ServerConfig` fields; the engine's own options are the config's `engine` table."""

    kind: GenerateEngine = Field(
        "local",
        description="where generation runs: sglang, vllm, openai_chat or local (the engines "
        "of eyas.backends.registry)",
    )

    @model_validator(mode="after")
    def _urls_for_http(self) -> BackendConfig:
        from eyas.backends.registry import ENGINES, backend_class

        if backend_class(self.kind).remote and not self.urls and self.url_file is None:
            raise ValueError(f"backend.kind={self.kind!r} needs at least one url (or a url_file)")
        if self.url_file is not None and not backend_class(self.kind).remote:
            raise ValueError(f"backend.kind={self.kind!r} runs in process: it takes no url_file")
        if self.concurrency is None:
            self.concurrency = ENGINES[self.kind].default_concurrency
        return self


class DatasetConfig(_Strict):
    name: str
    path: Path
    format: SourceFormat = "auto"
    max_new_tokens: int | None = Field(None, ge=1)
    sampling: SamplingConfig | None = None
    multi_turn: Literal["last", "all"] = "last"
    limit: int | None = Field(None, ge=1)
    # this dataset's thinking switch (model.thinking for the others): one config can mix modes
    thinking: bool | None = None

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not v or any(c in v for c in "/\\ ") or v.startswith("."):
            raise ValueError("dataset names are file-name safe: no slashes, spaces or leading dot")
        return v


class GenerateConfig(_Strict):
    max_new_tokens: int = Field(2048, ge=1, description="new tokens per response")
    shard_size: int = Field(2000, ge=1, description="samples per committed Parquet shard")
    flush_s: float = Field(30.0, gt=0)
    input: Path | None = Field(
        None, description="rendered JSONL or prepare dir (default: the run's prepare stage)"
    )
    out: Path | None = Field(
        None, description="output stage dir (default: the run's generate stage)"
    )
    multi_turn: Literal["last", "all"] = Field(
        "last", description="regenerate the last assistant turn, or every turn in order"
    )
    shard: str = Field("0/1", description="i/n: this job's slice of ids (sha256 of the id)")
    progress: bool = Field(True, description="show the progress bar")

    @field_validator("shard")
    @classmethod
    def _shard(cls, v: str) -> str:
        return check_shard(v)


class RunConfig(_Strict):
    name: str = "run"
    dir: Path = Path("runs")


class PipelineConfig(_Strict):
    """`eyas prepare` and `eyas generate`."""

    path_keys: ClassVar = (
        "model.dir",
        "run.dir",
        "generate.input",
        "generate.out",
        "datasets.*.path",
        "backend.url_file",
        "engine.python",
    )
    input_keys: ClassVar = ("model.dir",)  # prepare also reads datasets.*.path

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig
    backend: BackendConfig = Field(default_factory=BackendConfig)
    engine: EngineSettings = Field(
        description="the options of the engine `backend.kind` names (its package's options)"
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    datasets: list[DatasetConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _engine(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        backend = data.get("backend")
        kind = BackendConfig.model_fields["kind"].default
        if isinstance(backend, BackendConfig):
            kind = backend.kind
        elif isinstance(backend, dict):
            kind = backend.get("kind", kind)
        return engine_input(data, kind, "generate")

    @model_validator(mode="after")
    def _unique_names(self) -> PipelineConfig:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names must be unique: {names}")
        return self

    def stage_dir(self, stage: str) -> Path:
        return self.run.dir / self.run.name / stage

    @property
    def generate_input(self) -> Path:
        return self.generate.input or self.stage_dir("prepare")

    @property
    def generate_out(self) -> Path:
        return self.generate.out or self.stage_dir("generate")


def load_config(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Load and validate a pipeline TOML; `overrides` are `dotted.key=value` strings."""
    return build_config(PipelineConfig, path, None, overrides)
