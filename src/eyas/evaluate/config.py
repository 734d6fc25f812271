"""`eyas eval`: acceptance length per dataset, offline or inside a serving engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator, model_validator

from eyas.backends.server_config import ServerConfig
from eyas.backends.server_config import server_defaults as _server_defaults
from eyas.config import (
    EngineSettings,
    EvalEngine,
    engine_input,
    joinable,
    served_needs_urls,
    server_input,
)
from eyas.options import Strict as _Strict
from eyas.options import check_urls


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
        data = server_input(cls, data, "eval")
        if not isinstance(data, dict):
            return data
        kind = data.get("backend", cls.model_fields["backend"].default)
        return engine_input(data, kind, "eval")

    @field_validator("baseline_urls")
    @classmethod
    def _http_urls(cls, urls: list[str]) -> list[str]:
        return check_urls(urls)

    @model_validator(mode="after")
    def _tree(self) -> EvalConfig:
        if (self.input is None) == (not self.bench):
            raise ValueError("give --input PROMPTS or --bench NAMES (one of them)")
        from eyas.backends.registry import eval_engine_names

        if self.server.url_file is not None and not joinable(self.backend):
            # figures from counter deltas read before and after each dataset on every server:
            # one joining in between would count its whole history
            joining = [n for n in eval_engine_names() if joinable(n)]
            raise ValueError(
                f"--url-file needs --backend {' or '.join(joining)} (list {self.backend} "
                "servers with --url)"
            )
        if why := served_needs_urls(self.backend, self.server, self.engine, joinable(self.backend)):
            raise ValueError(why)
        return self
