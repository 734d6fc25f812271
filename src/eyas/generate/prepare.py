"""`eyas prepare`: convert and render every dataset of a pipeline config.

    eyas prepare --config configs/kimi-k2.5-sglang.toml

Writes `<run>/prepare/conversations/<name>.jsonl` (+ `.errors.jsonl`),
`<run>/prepare/rendered/<name>.jsonl` (+ `.errors.jsonl`, `.manifest.json`) and a stage
`manifest.json`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson

from eyas import __version__
from eyas.errors import EyasError
from eyas.generate.config import PipelineConfig
from eyas.jsonl import write_json
from eyas.records import SCHEMA_VERSION, RowError
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.sources import convert_rows, detect_format, read_rows


@dataclass(frozen=True)
class PreparedDataset:
    """One dataset's prepare summary: the stage manifest's `datasets.<name>` entry."""

    format: str  # the source format (detected when the config says auto)
    converted: int
    convert_reasons: dict[str, int]  # rejected rows per reason
    thinking: bool | None  # the render's thinking switch (None: the template's default)
    rendered: int
    render_reasons: dict[str, int]

    @property
    def rejected(self) -> int:
        return sum(self.convert_reasons.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "converted": self.converted,
            "convert_reasons": dict(self.convert_reasons),
            "thinking": self.thinking,
            "rendered": self.rendered,
            "render_reasons": dict(self.render_reasons),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreparedDataset:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


def prepare(cfg: PipelineConfig, renderer: Renderer) -> dict[str, PreparedDataset]:
    """Convert and render every dataset into `<run>/prepare/{conversations,rendered}/`;
    dataset name -> its summary."""
    if not cfg.datasets:
        raise EyasError("no_datasets", "the config lists no [[datasets]] to prepare")
    out = cfg.stage_dir("prepare")
    summary: dict[str, PreparedDataset] = {}
    for ds in cfg.datasets:
        auto = ds.format == "auto"
        fmt = detect_format(read_rows(ds.path), source=str(ds.path)) if auto else ds.format
        conv_path = out / "conversations" / f"{ds.name}.jsonl"
        conv_path.parent.mkdir(parents=True, exist_ok=True)
        reasons: Counter = Counter()
        n_ok = 0
        with (
            conv_path.open("wb") as f,
            (out / "conversations" / f"{ds.name}.errors.jsonl").open("wb") as e,
        ):
            rows = islice(read_rows(ds.path), ds.limit)
            for item in convert_rows(rows, fmt, ds.name, str(ds.path)):
                if isinstance(item, RowError):
                    reasons[item.reason] += 1
                    e.write(orjson.dumps(item.to_dict()) + b"\n")
                else:
                    n_ok += 1
                    f.write(orjson.dumps(item.to_dict()) + b"\n")
        # a dataset's own thinking switch, else the model's (a config can mix both modes)
        ds_renderer = renderer if ds.thinking is None else renderer.with_thinking(ds.thinking)
        rendered = render_file(ds_renderer, conv_path, out / "rendered" / f"{ds.name}.jsonl")
        summary[ds.name] = PreparedDataset(
            format=fmt,
            converted=n_ok,
            convert_reasons=dict(reasons),
            thinking=ds_renderer.thinking,
            rendered=rendered.num_rendered,
            render_reasons=dict(rendered.reasons),
        )
    write_json(
        out / "manifest.json",
        {
            "stage": "prepare",
            "eyas_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "config": cfg.model_dump(mode="json"),
            "render": renderer.describe(),
            "datasets": {name: d.to_dict() for name, d in summary.items()},
        },
    )
    return summary
