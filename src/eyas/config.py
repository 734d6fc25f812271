"""Pipeline configuration: strict pydantic models loaded from TOML (unknown keys rejected).

Defaults live only here. Relative paths are resolved against the config file's directory.
Dotted overrides (`backend.concurrency=128`) are validated like the file itself.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(_Strict):
    dir: Path
    profile: Literal["kimi-k2.5", "kimi-k2", "qwen3", "generic"] | None = None
    # None leaves the template default; Kimi-K2.5's default is thinking on.
    thinking: bool | None = None
    trust_remote_code: bool = False


class SamplingConfig(_Strict):
    """Sent to the server under its own parameter names (anchors.md #13) and stored per sample.

    Temperature defaults to 0 (greedy): the drafter is evaluated at temperature 0 and greedy
    regeneration gives the target's most likely continuation; set it explicitly otherwise.
    """

    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int | None = None
    seed: int | None = None
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)


class RetryConfig(_Strict):
    max_attempts: int = Field(5, ge=1)
    backoff_s: float = Field(1.0, ge=0.0)
    max_backoff_s: float = Field(60.0, ge=0.0)
    # Stop dispatching (the run stays resumable) once this many jobs in a row failed on
    # retryable errors after all their attempts: the servers are down, not the data, and
    # going on would only fill errors.jsonl. 0 = never stop.
    max_consecutive_failures: int = Field(64, ge=0)


class BackendConfig(_Strict):
    kind: Literal["sglang", "vllm", "openai_chat", "local"] = "local"
    urls: list[str] = Field(default_factory=list)
    # In-flight requests per server (local: the batch size).
    concurrency: int = Field(64, ge=1)
    # SGLang only: requests sent together as one /generate batch (1 = one request per call).
    batch_size: int = Field(8, ge=1)
    timeout_s: float = Field(600.0, gt=0)
    ready_timeout_s: float = Field(600.0, ge=0)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    vllm_endpoint: Literal["completions", "generate"] = "completions"
    served_model: str | None = None
    # Name of the environment variable holding the API key; the key itself is never stored.
    api_key_env: str | None = None

    @model_validator(mode="after")
    def _urls_for_http(self) -> BackendConfig:
        if self.kind != "local" and not self.urls:
            raise ValueError(f"backend.kind={self.kind!r} needs at least one url")
        return self


class DatasetConfig(_Strict):
    name: str
    path: Path
    format: Literal["glaive", "hermes", "xlam", "sharegpt", "ultrachat", "openai", "auto"] = "auto"
    max_new_tokens: int | None = Field(None, ge=1)
    sampling: SamplingConfig | None = None
    multi_turn: Literal["last", "all"] = "last"
    limit: int | None = Field(None, ge=1)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not v or any(c in v for c in "/\\ ") or v.startswith("."):
            raise ValueError("dataset names are file-name safe: no slashes, spaces or leading dot")
        return v


class GenerateConfig(_Strict):
    max_new_tokens: int = Field(2048, ge=1)
    shard_size: int = Field(2000, ge=1)
    flush_s: float = Field(30.0, gt=0)


class RunConfig(_Strict):
    name: str = "run"
    dir: Path = Path("runs")


class PipelineConfig(_Strict):
    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig
    backend: BackendConfig = Field(default_factory=BackendConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    datasets: list[DatasetConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> PipelineConfig:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names must be unique: {names}")
        return self

    def stage_dir(self, stage: str) -> Path:
        return self.run.dir / self.run.name / stage


def _set_dotted(data: dict[str, Any], key: str, raw: str) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string
    node[parts[-1]] = value


def _resolve(path: Path, base: Path) -> Path:
    path = path.expanduser()
    return path if path.is_absolute() else (base / path)


def load_config(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Load and validate a pipeline TOML; `overrides` are `dotted.key=value` strings."""
    path = Path(path)
    data = tomllib.loads(path.read_text())
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not key=value")
        _set_dotted(data, key.strip(), raw.strip())
    cfg = PipelineConfig.model_validate(data)
    base = path.parent
    cfg.model.dir = _resolve(cfg.model.dir, base)
    cfg.run.dir = _resolve(cfg.run.dir, base)
    for ds in cfg.datasets:
        ds.path = _resolve(ds.path, base)
    return cfg


class TrainConfig(_Strict):
    """`eyas train` (TOML via --config, or flags). Defaults follow the peers where they agree
    (AdamW β=(0.9, 0.95), clip 0.5, 7 TTT steps with weights 0.8^k)."""

    target: Path
    data: Path
    out: Path
    steps: int = Field(1000, ge=1)
    ttt: int = Field(7, ge=1)
    draft_vocab: int = Field(32000, ge=2)
    max_len: int = Field(4096, ge=8)
    length_policy: Literal["skip", "truncate"] = "skip"
    include_truncated: bool = False
    batch_tokens: int = Field(8192, ge=8)
    grad_accum: int = Field(1, ge=1)
    lr: float = Field(1e-4, gt=0)
    warmup_steps: int = Field(20, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    clip: float = Field(0.5, gt=0)
    loss_decay: float = Field(0.8, gt=0, le=1)
    seed: int = 0
    checkpoint_every: int = Field(200, ge=1)
    aux_layers: list[int] | None = None
    intermediate_size: int | None = None
    device: str | None = None  # cuda when available, else cpu
    fsdp: bool = False  # FSDP2 under torchrun (gloo on CPU, NCCL on GPU); DDP otherwise
    trust_remote_code: bool = False
