"""Parquet shards of samples: the generate stage's output (docs/architecture.md, "Store").

A stage directory holds `part-<job>-NNNNN.parquet` shards (older runs: `part-NNNNN.parquet`),
the job records under `jobs/`, and the combined `manifest.json` and `errors.jsonl`
(`eyas.store.runs`: many jobs may write one folder at once). Shards are written to a temporary name and renamed when complete, so a crash or SIGKILL leaves
only whole shards. Resume reads the `id` column of the committed shards and skips those ids;
it never counts lines. The files are plain Parquet (ids as list<int32>), readable by pyarrow
and `datasets.load_dataset("parquet", ...)` without eyas.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from eyas.records import Sample
from eyas.store.runs import clean_stale_tmps, new_job_id, part_job
from eyas.store.samples import Ragged, read_parquet

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("dataset", pa.string()),
        ("turn", pa.int32()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("output_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("finish_reason", pa.string()),
        # int (token id) or str (stop string), JSON-encoded to keep one column type
        ("matched_stop", pa.string()),
        ("messages", pa.string()),
        ("tools", pa.string()),
        ("backend", pa.string()),
        ("sampling", pa.string()),
        ("attempts", pa.int32()),
        ("latency_s", pa.float64()),
    ]
)
_JSON_COLUMNS = ("matched_stop", "messages", "tools", "sampling")


def shard_paths(stage_dir: str | Path) -> list[Path]:
    return sorted(Path(stage_dir).glob("part-*.parquet"))


def committed_ids(stage_dir: str | Path) -> set[str]:
    """Ids in committed shards of every job (the resume index)."""
    return id_index(stage_dir)[0]


def id_index(stage_dir: str | Path, paths: list[Path] | None = None) -> tuple[set[str], int]:
    """(ids committed in the shards, rows beyond the first of an id: two jobs that raced)."""
    by_job, rows = ids_by_job(stage_dir, paths)
    ids = set().union(*by_job.values()) if by_job else set()
    return ids, rows - len(ids)


def ids_by_job(
    stage_dir: str | Path, paths: list[Path] | None = None
) -> tuple[dict[str | None, set[str]], int]:
    """(job id -> ids its shards hold (None: old unnamed shards), rows read)."""
    by_job: dict[str | None, set[str]] = {}
    rows = 0
    for path in shard_paths(stage_dir) if paths is None else paths:
        column = read_parquet(path, columns=["id"]).column("id").to_pylist()
        rows += len(column)
        by_job.setdefault(part_job(path.name), set()).update(column)
    return by_job, rows


def _to_columns(samples: list[Sample]) -> dict[str, Any]:
    cols: dict[str, Any] = {name: [] for name in SCHEMA.names}
    for s in samples:
        cols["id"].append(s.id)
        cols["dataset"].append(s.dataset)
        cols["turn"].append(s.turn)
        cols["prompt_ids"].append(s.prompt_ids)
        cols["output_ids"].append(s.output_ids)
        cols["loss_mask"].append(s.loss_mask)
        cols["finish_reason"].append(s.finish_reason)
        cols["matched_stop"].append(orjson.dumps(s.matched_stop).decode())
        cols["messages"].append(orjson.dumps(s.messages).decode())
        cols["tools"].append(orjson.dumps(s.tools).decode())
        cols["backend"].append(s.backend)
        cols["sampling"].append(orjson.dumps(s.sampling).decode())
        cols["attempts"].append(s.attempts)
        cols["latency_s"].append(s.latency_s)
    cols["prompt_ids"] = Ragged.from_lists(cols["prompt_ids"]).to_arrow()
    cols["output_ids"] = Ragged.from_lists(cols["output_ids"]).to_arrow()
    cols["loss_mask"] = Ragged.from_lists(cols["loss_mask"], np.int8).to_arrow()
    return cols


class ShardWriter:
    """Buffers samples and commits them as atomic Parquet shards named after this job
    (`part-<job>-NNNNN.parquet`), so no two jobs writing one folder can collide: a job never
    replaces or deletes another's shard (`eyas.store.runs`).
    """

    def __init__(self, stage_dir: str | Path, shard_size: int = 2000, job_id: str | None = None):
        self.stage_dir = Path(stage_dir)
        self.stage_dir.mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        self.job_id = job_id or new_job_id()
        self._buffer: list[Sample] = []
        self._next = 0
        self.num_committed = 0
        clean_stale_tmps(self.stage_dir)  # shards being written when their (local) job died

    def add(self, sample: Sample) -> None:
        self._buffer.append(sample)
        if len(self._buffer) >= self.shard_size:
            self.flush()

    def add_group(self, samples: list[Sample]) -> None:
        """Add samples that must be committed together (one conversation's turns)."""
        if self._buffer and len(self._buffer) + len(samples) > self.shard_size:
            self.flush()
        self._buffer.extend(samples)
        if len(self._buffer) >= self.shard_size:
            self.flush()

    def __len__(self) -> int:
        return len(self._buffer)

    def flush(self) -> Path | None:
        if not self._buffer:
            return None
        table = pa.table(_to_columns(self._buffer), schema=SCHEMA)
        final = self.stage_dir / f"part-{self.job_id}-{self._next:05d}.parquet"
        tmp = self.stage_dir / f".{final.stem}.tmp"
        pq.write_table(table, tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)  # the commit point
        self._next += 1
        self.num_committed += len(self._buffer)
        self._buffer = []
        return final
