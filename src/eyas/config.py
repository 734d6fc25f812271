"""Configuration: strict pydantic models (unknown keys rejected), one per config-driven command.

Defaults live only here: the command-line flags of `generate`, `prepare`, `train`, `capture`
and `eval` are generated from these fields (`eyas.cli_schema`), so a flag's type, help and
default come from its field. A config comes from a TOML file (`--config`), then flags, then
dotted `--set key=value` overrides, validated like the file itself. Relative paths in a file
are resolved against the file's directory; on the command line, against the working directory.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from eyas.errors import EyasError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # dotted keys (`*` for every list item) holding paths relative to a config file
    path_keys: ClassVar[tuple[str, ...]] = ()


def _format_name(v: str | None) -> str | None:
    from eyas.formats import MODEL_FORMATS

    if v is not None and v not in MODEL_FORMATS:
        raise ValueError(f"unknown profile {v!r}; choose one of {sorted(MODEL_FORMATS)}")
    return v


# -- pipeline: prepare and generate ------------------------------------------------------------


class ModelConfig(_Strict):
    dir: Path = Field(description="local model (or tokenizer) directory")
    profile: str | None = Field(
        None, description="model format (eyas.formats); detected from the tokenizer when unset"
    )
    thinking: bool | None = Field(
        None, description="the format's thinking switch; unset leaves the template default"
    )
    trust_remote_code: bool = Field(
        False, description="let transformers run the model's own code (Kimi's tokenizer needs it)"
    )

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, v: str | None) -> str | None:
        return _format_name(v)


class SamplingConfig(_Strict):
    """Sent to the server under its own parameter names and stored per sample. Temperature 0
    (greedy) by default: the drafter is evaluated greedily and greedy regeneration gives the
    target's most likely continuation."""

    temperature: float = Field(0.0, ge=0.0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling")
    top_k: int | None = Field(None, description="top-k sampling")
    seed: int | None = Field(None, description="sampling seed")
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)


class RetryConfig(_Strict):
    max_attempts: int = Field(5, ge=1, description="tries per request")
    backoff_s: float = Field(1.0, ge=0.0)
    max_backoff_s: float = Field(60.0, ge=0.0)
    max_consecutive_failures: int = Field(
        64,
        ge=0,
        description="stop (resumably) after this many jobs in a row fail on transport or 5xx "
        "errors: the servers are down, not the data; 0 never stops",
    )


DEFAULT_CONCURRENCY = {"vllm": 256, "openai_chat": 256, "sglang": 64, "local": 16}


class BackendConfig(_Strict):
    kind: Literal["sglang", "vllm", "openai_chat", "local"] = Field(
        "local", description="where generation runs"
    )
    urls: list[str] = Field(default_factory=list, description="server URL; repeat for several")
    concurrency: int | None = Field(
        None,
        ge=1,
        description="in-flight requests per server (default: vllm and openai_chat 256, sglang "
        "64 calls of batch_size prompts, local 16 prompts per batch)",
    )
    batch_size: int = Field(8, ge=1, description="sglang: prompts per /generate call")
    timeout_s: float = Field(600.0, gt=0, description="seconds per request")
    ready_timeout_s: float = Field(600.0, ge=0, description="seconds to wait for the servers")
    retry: RetryConfig = Field(default_factory=RetryConfig)
    vllm_endpoint: Literal["completions", "generate"] = "completions"
    served_model: str | None = None
    api_key_env: str | None = Field(
        None, description="environment variable holding the API key (the key is never stored)"
    )

    @field_validator("urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s) URL")
        return urls

    @model_validator(mode="after")
    def _urls_for_http(self) -> BackendConfig:
        if self.kind != "local" and not self.urls:
            raise ValueError(f"backend.kind={self.kind!r} needs at least one url")
        if self.concurrency is None:
            # Enough in flight that the server's scheduler batches fully (vLLM runs up to 256
            # sequences by default; measured on CPU: 512 in flight 1.7x faster than 64).
            self.concurrency = DEFAULT_CONCURRENCY[self.kind]
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

    @field_validator("shard")
    @classmethod
    def _shard(cls, v: str) -> str:
        i, sep, n = v.partition("/")
        if not sep or not i.isdigit() or not n.isdigit() or not 0 <= int(i) < int(n):
            raise ValueError(f"shard takes i/n with 0 <= i < n, not {v!r}")
        return v


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
    )

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig
    backend: BackendConfig = Field(default_factory=BackendConfig)
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    datasets: list[DatasetConfig] = Field(default_factory=list)

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


# -- train ---------------------------------------------------------------------------------------


class TrainConfig(_Strict):
    """`eyas train`. Defaults follow the peers where they agree (AdamW β=(0.9, 0.95), clip 0.5,
    7 TTT steps with weights 0.8^k)."""

    path_keys: ClassVar = ("target", "data", "hidden_states", "out", "quarantine")

    target: Path = Field(description="target model directory")
    data: Path | None = Field(None, description="generate stage dir, Parquet or sample JSONL")
    hidden_states: Path | None = Field(
        None,
        description="`eyas capture` output: train from captured target states (no target "
        "forward in this process; only its embedding, final norm and lm_head are loaded)",
    )
    capture_ahead: int = Field(
        0,
        ge=0,
        description="stream: capture this many shards ahead of training into a bounded spool "
        "under OUT (needs --data and a capture backend); 0 trains on --hidden-states or online",
    )
    capture_backend: Literal["local", "vllm"] = Field(
        "local", description="with --capture-ahead: where the states are captured"
    )
    capture_urls: list[str] = Field(
        default_factory=list, description="with --capture-ahead: vLLM capture server URLs"
    )
    out: Path = Field(description="output directory")
    steps: int = Field(1000, ge=1, description="optimizer steps")
    ttt: int = Field(7, ge=1, description="training-time-test steps")
    draft_vocab: int = Field(32000, ge=2, description="draft vocabulary size")
    max_len: int | None = Field(
        None, ge=8, description="longest trained sequence (default: the target's context length)"
    )
    length_policy: Literal["skip", "truncate"] = Field(
        "skip", description="for sequences over max_len: skip them or keep their first max_len"
    )
    include_truncated: bool = Field(
        False, description="also train on outputs cut at max_new_tokens"
    )
    quarantine: Path | None = Field(
        None, description="audit quarantine list (default: the one beside the data, if any)"
    )
    include_quarantined: bool = Field(False, description="train on quarantined samples too")
    batch_tokens: int = Field(8192, ge=8, description="padded tokens per micro-batch")
    grad_accum: int = Field(1, ge=1)
    lr: float = Field(1e-4, gt=0, description="peak learning rate")
    warmup_steps: int = Field(20, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    clip: float = Field(0.5, gt=0)
    loss_decay: float = Field(0.8, gt=0, le=1)
    seed: int = 0
    checkpoint_every: int = Field(200, ge=1)
    aux_layers: list[int] | None = Field(
        None, description="target layers fused by the drafter (default: SGLang's [2, N/2, N-3])"
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="drafter MLP width (default: the target's, or a published shape)"
    )
    method: str = Field(
        "eagle3",
        description="drafter method: eagle3, eagle3.1 (EAGLE-3 with fc_norm and norm_output) "
        "or dflash",
    )
    draft_layers: int | None = Field(
        None, ge=1, description="drafter decoder layers (EAGLE-3: 1; DFlash: default 1)"
    )
    num_attention_heads: int | None = Field(
        None, ge=1, description="drafter attention heads (default: the target's)"
    )
    head_dim: int | None = Field(
        None,
        ge=8,
        description="drafter head dim (default: hidden/heads if 32, 64, 128 or 256, else 128)",
    )
    block_size: int = Field(
        8, ge=2, description="dflash: tokens per block (the anchor, then block_size - 1 drafts)"
    )
    max_anchors: int = Field(512, ge=1, description="dflash: blocks drawn per sequence")
    dflash_weighting: Literal["decay", "dpace"] = Field(
        "decay", description="dflash: slot weights exp(-(i-1)/gamma), or D-PACE"
    )
    dflash_gamma: float = Field(4.0, gt=0, description="dflash: decay of the slot weights")
    dpace_alpha: float = Field(0.5, ge=0, le=1, description="dflash: D-PACE smoothing")
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="dflash: the mask token (default: the target's pad token, else an id "
        "no training sequence uses)",
    )
    chunk_len: int = Field(
        1024, ge=16, description="sequence chunk for attention and loss (memory is linear in T)"
    )
    device: str | None = Field(None, description="cuda when available, else cpu")
    fsdp: bool = Field(False, description="FSDP2 under torchrun; DDP otherwise")
    trust_remote_code: bool = False

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        from eyas.drafter.registry import METHODS

        if value not in METHODS:
            raise ValueError(f"method is one of {sorted(METHODS)}, not {value!r}")
        return value

    @model_validator(mode="after")
    def _sources(self) -> TrainConfig:
        if self.method.startswith("eagle3") and (self.draft_layers or 1) != 1:
            raise ValueError("EAGLE-3 drafters have one decoder layer (draft_layers = 1)")
        if self.hidden_states is None and self.data is None:
            raise ValueError("give --data (samples) or --hidden-states (an eyas capture)")
        if self.capture_ahead and self.data is None:
            raise ValueError("--capture-ahead captures --data while training: give --data")
        if self.capture_ahead and self.hidden_states is not None:
            raise ValueError("--capture-ahead and --hidden-states are two different modes")
        return self


# -- capture -------------------------------------------------------------------------------------


class CaptureConfig(_Strict):
    """`eyas capture`: target hidden states for drafter training, through a serving engine."""

    path_keys: ClassVar = ("target", "data", "out", "vllm_python", "quarantine", "storage_dir")

    target: Path = Field(description="target model directory")
    data: Path = Field(description="generate stage dir, Parquet or sample JSONL")
    out: Path = Field(description="capture output directory (shards + manifest)")
    backend: Literal["local", "vllm"] = Field("local", description="where the target runs")
    urls: list[str] = Field(default_factory=list, description="vLLM capture server URL(s)")
    vllm_python: Path | None = Field(
        None, description="python of a vLLM install: eyas starts and stops a local server"
    )
    storage_dir: Path | None = Field(
        None,
        description="the server's shared_storage_path (where it writes per-request files; "
        "default: OUT/.incoming, used when eyas starts the server)",
    )
    aux_layers: list[int] | None = Field(
        None, description="aux layer ids (default: SGLang's [2, N/2, N-3])"
    )
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="stored state dtype")
    shard_size: int = Field(64, ge=1, description="samples per committed shard")
    concurrency: int = Field(8, ge=1, description="in-flight requests per server")
    timeout_s: float = Field(600.0, gt=0)
    ready_timeout_s: float = Field(300.0, ge=0)
    max_attempts: int = Field(4, ge=1)
    max_len: int | None = Field(None, ge=8, description="skip longer sequences (recorded)")
    include_truncated: bool = False
    quarantine: Path | None = None
    include_quarantined: bool = False
    force: bool = Field(False, description="capture even when the disk looks too small")
    limit: int | None = Field(None, ge=1, description="capture at most this many samples")
    trust_remote_code: bool = False

    @model_validator(mode="after")
    def _server(self) -> CaptureConfig:
        if self.backend == "vllm" and not self.urls and self.vllm_python is None:
            raise ValueError("--backend vllm needs --url (a running server) or --vllm-python")
        return self


# -- eval ----------------------------------------------------------------------------------------


class EvalConfig(_Strict):
    """`eyas eval`: acceptance length per dataset."""

    path_keys: ClassVar = ("target", "drafter", "input", "json_out", "vllm_python")

    target: Path = Field(description="target model directory")
    drafter: Path = Field(
        description="eyas drafter dir, `eyas train --out` dir, or an SGLang/speculators export"
    )
    input: Path = Field(description="rendered prompts: prepare dir, JSONL or stage dir")
    backend: Literal["local", "vllm", "sglang"] = Field(
        "local", description="local (offline), or inside a serving engine"
    )
    urls: list[str] = Field(default_factory=list, description="server URL (served backends)")
    vllm_python: Path | None = Field(
        None, description="python of a vLLM install: eyas starts the server with the drafter"
    )
    k: int = Field(3, ge=1, description="draft tokens per verify step (chain) or tree depth")
    topk: int = Field(1, ge=1, description="tree drafts: branches per step (1: a chain)")
    num_draft_tokens: int | None = Field(
        None, ge=1, description="tree drafts: draft tokens kept per verify step"
    )
    temperature: float = Field(0.0, ge=0.0)
    max_new_tokens: int = Field(256, ge=1)
    limit: int | None = Field(None, ge=1, description="prompts per dataset")
    baseline: bool = Field(False, description="served: also run without the drafter (speedup)")
    lossless_check: bool = Field(
        True,
        description="at temperature 0, compare the outputs with the target's greedy decoding "
        "(served: the baseline run, else the target loaded here)",
    )
    seed: int = 0
    json_out: Path | None = Field(None, description="write the result as JSON")
    trust_remote_code: bool = False

    @model_validator(mode="after")
    def _tree(self) -> EvalConfig:
        if self.backend != "local" and not self.urls and self.vllm_python is None:
            raise ValueError(f"--backend {self.backend} needs --url or --vllm-python")
        if self.backend == "sglang" and self.vllm_python is not None:
            raise ValueError("--vllm-python starts vLLM; for SGLang pass --url")
        return self


# -- loading -------------------------------------------------------------------------------------


class ConfigError(EyasError):
    """A config file, flag or override a user must fix."""

    def __init__(self, detail: str):
        super().__init__("bad_config", detail)


def _parse_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare string


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {part} is not a table")
    node[parts[-1]] = value


def get_dotted(data: dict[str, Any], key: str) -> Any:
    node: Any = data
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _rebase(data: Any, parts: list[str], base: Path) -> None:
    if not parts or data is None:
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        for item in data if isinstance(data, list) else []:
            _rebase(item, rest, base)
        return
    if not isinstance(data, dict) or head not in data:
        return
    if not rest:
        value = data[head]
        if isinstance(value, str):
            path = Path(value).expanduser()
            data[head] = str(path if path.is_absolute() else base / path)
        return
    _rebase(data[head], rest, base)


M = TypeVar("M", bound=_Strict)


def build_config(
    model: type[M],
    file: str | Path | None = None,
    flags: dict[str, Any] | None = None,
    overrides: list[str] | None = None,
) -> M:
    """The config: `file` (TOML), then `flags` (dotted key -> value, only the ones given), then
    `overrides` (`key=value` strings). A flag and an override that set one key to different
    values conflict. Raises ConfigError or pydantic's ValidationError."""
    data: dict[str, Any] = {}
    if file is not None:
        file = Path(file)
        if not file.is_file():
            raise ConfigError(f"config file {file} does not exist")
        try:
            data = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file} is not valid TOML: {exc}") from exc
        for key in model.path_keys:
            _rebase(data, key.split("."), file.parent.resolve())
    for key, value in (flags or {}).items():
        set_dotted(data, key, value)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r} is not key=value")
        key, value = key.strip(), _parse_value(raw.strip())
        if flags and key in flags and flags[key] != value:
            raise ConfigError(f"--set {key}={raw.strip()} conflicts with its flag ({flags[key]!r})")
        set_dotted(data, key, value)
    return model.model_validate(data)


def load_config(path: str | Path, overrides: list[str] | None = None) -> PipelineConfig:
    """Load and validate a pipeline TOML; `overrides` are `dotted.key=value` strings."""
    return build_config(PipelineConfig, path, None, overrides)
