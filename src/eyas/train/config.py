"""`eyas train`: the training config; each drafter method's own options come from its package."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from eyas import config_legacy
from eyas.backends.server_config import ServerConfig
from eyas.backends.server_config import server_defaults as _server_defaults
from eyas.config import AuxLayers, CaptureEngine, DrafterMethod, server_input
from eyas.drafter.names import DEFAULT_METHOD
from eyas.drafter.options import OLD_KEYS, MethodOptions
from eyas.options import Strict as _Strict


class TrainConfig(_Strict, MethodOptions):
    """`eyas train`. Defaults follow the peers where they agree (AdamW β=(0.9, 0.95), clip 0.5,
    7 TTT steps with weights 0.8^k); each method's own options come from its package, nested
    under its name (`MethodOptions`: `dflash.block_size`, `--dflash.block-size`)."""

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
        description="draft vocabulary size (default: the 32000 most frequent supervised "
        "tokens, all of them when there are fewer, or the full vocabulary when 32000 would "
        "cover under 99% of the supervised tokens)",
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
        "in backward instead of keeping its activations; auto: on for micro-batches of more "
        "tokens than activation_checkpointing_above",
    )
    activation_checkpointing_above: int | None = Field(
        None,
        ge=1,
        description="auto's threshold, in tokens per micro-batch (rows x width); default: on a "
        "GPU the most whose step fits 80% of its memory without checkpointing by the printed "
        "estimate (at least 4096), elsewhere 4096",
    )
    fast_path: Literal["auto", "on", "compiled", "off"] = Field(
        "auto",
        description="the fast training step (FlexAttention TTT attention, the teacher once per "
        "micro-batch, the loss's gradient in forward; the same function as the reference "
        "path); auto: on on CUDA; compiled: on, with its elementwise work (norms, rotations, "
        "SwiGLU, the TTT merge, the loss's per-chunk arithmetic) through torch.compile",
    )
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="compute dtype: bf16 (autocast; FSDP2 all-gathers bf16 and reduces fp32) "
        "or fp32; auto: bf16 on CUDA, fp32 on CPU",
    )
    aux_layers: AuxLayers = Field(
        None, description="target layers fused by the drafter (default: SGLang's [2, N/2, N-3])"
    )
    intermediate_size: int | None = Field(
        None, ge=1, description="drafter MLP width (default: the target's, or a published shape)"
    )
    method: DrafterMethod = Field(
        DEFAULT_METHOD,
        description="drafter method: eagle3, eagle3.1 (EAGLE-3 with fc_norm and norm_output), "
        "dflash, dflash2 (DFlash with convolutions and a candidate selector) or peagle (P-EAGLE: "
        "EAGLE-3 drafting all positions in one forward)",
    )
    draft_layers: int | None = Field(
        None, ge=1, description="drafter decoder layers (EAGLE-3: 1; DFlash, DFlash2: default 2)"
    )
    attention: Literal["mha", "mla"] | None = Field(
        None,
        description="drafter attention: mha (Llama layer) or mla (DeepSeek-V3 latent attention, "
        "dims from the target; the EAGLE-3 default for MLA targets such as Kimi-K2.5); each "
        "method lists the kinds it builds",
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
        data = config_legacy.moved_keys(
            config_legacy.renamed_keys(data, "train"), "train", OLD_KEYS
        )
        return server_input(cls, data, "train")

    @model_validator(mode="after")
    def _sources(self) -> TrainConfig:
        from eyas.drafter.registry import get_method

        method = get_method(self.method)  # the method owns its layer count and attention kinds
        if problem := method.draft_layers_problem(self.draft_layers):
            raise ValueError(problem)
        kinds = method.attentions()
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
