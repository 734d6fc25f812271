"""What to generate: rendered prompts turned into jobs, sharded and minus what is done."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eyas.config import SamplingConfig
from eyas.errors import EyasError, RefusedError
from eyas.generate.config import PipelineConfig
from eyas.jobs import in_shard, parse_shard
from eyas.jsonl import read_json_object
from eyas.records import Conversation
from eyas.render.renderer import Renderer, has_unanswered
from eyas.store import read_rendered, sidecar


@dataclass(kw_only=True)
class Job:
    """One conversation to regenerate: a single prompt (`last`) or every turn (`all`)."""

    id: str
    dataset: str
    messages: list[dict]
    tools: list[dict]
    prompt_ids: list[int]
    turn: int
    max_new_tokens: int
    sampling: dict[str, Any]
    multi_turn: str = "last"
    thinking: bool | None = None  # the dataset's own switch; None: the renderer's


@dataclass(frozen=True)
class DatasetPlan:
    max_new_tokens: int
    sampling: dict[str, Any]
    multi_turn: str = "last"
    thinking: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {
            "max_new_tokens": self.max_new_tokens,
            "sampling": self.sampling,
            "multi_turn": self.multi_turn,
        }
        if self.thinking is not None:
            out["thinking"] = self.thinking
        return out


def sampling_dict(s: SamplingConfig) -> dict[str, Any]:
    return {k: v for k, v in s.model_dump().items() if v is not None}


def plans(cfg: PipelineConfig) -> tuple[DatasetPlan, dict[str, DatasetPlan]]:
    """The default plan (flags) and one per configured dataset."""
    default = DatasetPlan(
        cfg.generate.max_new_tokens, sampling_dict(cfg.sampling), cfg.generate.multi_turn
    )
    per = {
        d.name: DatasetPlan(
            d.max_new_tokens or cfg.generate.max_new_tokens,
            sampling_dict(d.sampling or cfg.sampling),
            d.multi_turn,
            d.thinking,
        )
        for d in cfg.datasets
    }
    return default, per


def _check_fingerprint(file: Path, renderer: Renderer) -> None:
    manifest = sidecar(file, ".manifest.json")
    if not manifest.exists():
        return
    render = read_json_object(manifest).get("render", {})
    for key, mine in (
        ("tokenizer_sha256", renderer.fingerprint),
        ("template_sha256", renderer.template_sha256),
    ):
        if render.get(key) and render[key] != mine:
            raise RefusedError(
                "fingerprint_mismatch",
                f"{file} was rendered with {key}={render[key][:12]}…, but "
                f"{renderer.model_dir} has {mine[:12]}…; re-run prepare/render",
            )


def load_jobs(cfg: PipelineConfig, renderer: Renderer, done: set[str]) -> tuple[list[Job], Counter]:
    default, per = plans(cfg)
    shard = parse_shard(cfg.generate.shard)
    jobs: list[Job] = []
    skipped: Counter = Counter()
    checked: set[Path] = set()
    for file, row in read_rendered(cfg.generate_input, conversations=True):
        if file not in checked:
            _check_fingerprint(file, renderer)
            checked.add(file)
        conv = Conversation.from_dict(row)
        if not in_shard(conv.id, shard):
            skipped["other_shard"] += 1
            continue
        if conv.id in done:
            skipped["already_done"] += 1
            continue
        plan = per.get(conv.dataset, default)
        # A conversation whose source leaves a turn unanswered (MT-Bench's second question
        # follows the model's own first answer) can only be answered turn by turn.
        multi_turn = "all" if has_unanswered(conv.messages) else plan.multi_turn
        jobs.append(
            Job(
                id=conv.id,
                dataset=conv.dataset,
                messages=conv.messages,
                tools=conv.tools,
                prompt_ids=row["prompt_ids"],
                turn=row.get("turn", -1),
                max_new_tokens=plan.max_new_tokens,
                sampling=plan.sampling,
                multi_turn=multi_turn,
                thinking=plan.thinking,
            )
        )
    ids = [j.id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i, c in Counter(ids).items() if c > 1)
        raise EyasError("duplicate_id", f"id {dup} appears more than once in the input")
    return jobs, skipped
