"""Samples as columns, the one reader every stage uses (audit, train, capture, export, eval,
show): token ids stay in numpy (offsets + flat values), so 100M tokens load in seconds instead
of becoming 100M Python ints.

Accepted inputs: an eyas stage directory (`part-*.parquet`), an eyas run directory (its
`generate/` stage), any Parquet file or folder with at least `id`, `prompt_ids`, `output_ids`,
and the interchange JSONL of docs/architecture.md (Sample field names, ids as JSON integer lists).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from eyas.errors import unreadable
from eyas.jsonl import open_input, parse_line, require_file
from eyas.records import RecordError, Sample
from eyas.store.runs import stage_manifest


def read_parquet(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file; one that cannot be read is a user error naming the file."""
    path = Path(path)
    require_file(path, "Parquet file")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise unreadable(path, "parquet", exc) from exc


@dataclass
class Ragged:
    """Variable-length int rows: row i is `values[offsets[i]:offsets[i+1]]`."""

    offsets: np.ndarray  # [N+1] int64
    values: np.ndarray  # [total]
    valid: np.ndarray | None = None  # [N] bool; None means every row is present

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def row(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def present(self, i: int) -> bool:
        return self.valid is None or bool(self.valid[i])

    def to_arrow(self) -> pa.ListArray:
        """A list<int> column (int32 offsets; pyarrow's per-element conversion of Python lists
        cost ~10x more and dominated the generate client's CPU time)."""
        mask = pa.array(~self.valid) if self.valid is not None else None
        return pa.ListArray.from_arrays(
            pa.array(self.offsets.astype(np.int32)), pa.array(self.values), mask=mask
        )

    @classmethod
    def from_lists(cls, rows: list[list[int] | None], dtype=np.int32) -> Ragged:
        lengths = np.fromiter((len(r) if r is not None else 0 for r in rows), np.int64, len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        parts = [np.asarray(r, dtype=dtype) for r in rows if r]
        values = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
        valid = np.array([r is not None for r in rows]) if any(r is None for r in rows) else None
        return cls(offsets, values, valid)

    @classmethod
    def from_arrow(cls, column: pa.ChunkedArray | pa.Array) -> Ragged:
        arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if pa.types.is_large_list(arr.type):
            arr = arr.cast(pa.list_(arr.type.value_type))
        offsets = arr.offsets.to_numpy().astype(np.int64)
        values = arr.values.to_numpy(zero_copy_only=False)
        base = offsets[0]
        valid = None
        if arr.null_count:
            valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False))
        return cls(offsets - base, values[base : offsets[-1]], valid)


@dataclass
class SampleTable:
    ids: list[str]
    dataset: list[str]
    prompt: Ragged
    output: Ragged
    loss_mask: Ragged
    finish_reason: list[str | None]  # None: the producer recorded none
    matched_stop: list[Any]
    turn: np.ndarray
    messages_json: list[str | None]
    tools_json: list[str | None]
    backend: list[str]
    sampling_json: list[str | None]
    source: str = ""
    manifest: dict = field(default_factory=dict)
    duplicates: int = 0  # rows of an id committed again by another job, dropped on load
    _parsed: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)

    def _json(self, name: str, i: int) -> Any:
        key = (name, i)
        if key not in self._parsed:
            raw = getattr(self, f"{name}_json")[i]
            try:
                self._parsed[key] = orjson.loads(raw) if isinstance(raw, (str, bytes)) else raw
            except orjson.JSONDecodeError as exc:
                raise RecordError(
                    "invalid_json",
                    f"{self.source}: sample {self.ids[i]}: {name} is not valid JSON ({exc.msg})",
                ) from exc
        return self._parsed[key]

    def messages(self, i: int) -> list[dict]:
        return self._json("messages", i) or []

    def tools(self, i: int) -> list[dict]:
        return self._json("tools", i) or []

    def sampling(self, i: int) -> dict:
        return self._json("sampling", i) or {}

    def mask_ok(self, i: int) -> bool:
        """No loss mask (every output token trained), or one 0/1 entry per output token."""
        if not self.loss_mask.present(i):
            return True
        mask = self.loss_mask.row(i)
        return len(mask) == len(self.output.row(i)) and bool(np.isin(mask, (0, 1)).all())

    def supervised(self, i: int) -> np.ndarray:
        """Per output token, 1 if trained (every output token unless a loss mask says
        otherwise). A mask of the wrong length is an error, never read as all ones."""
        if not self.loss_mask.present(i):
            return np.ones(len(self.output.row(i)), dtype=np.int8)
        if not self.mask_ok(i):
            raise RecordError(
                "bad_loss_mask",
                f"sample {self.ids[i]}: loss_mask has {len(self.loss_mask.row(i))} entries for "
                f"{len(self.output.row(i))} output tokens (or values other than 0/1)",
            )
        return self.loss_mask.row(i)

    def sample(self, i: int) -> Sample:
        return Sample(
            id=self.ids[i],
            dataset=self.dataset[i],
            prompt_ids=self.prompt.row(i).tolist(),
            output_ids=self.output.row(i).tolist(),
            finish_reason=self.finish_reason[i],
            matched_stop=self.matched_stop[i],
            messages=self.messages(i),
            tools=self.tools(i),
            backend=self.backend[i],
            sampling=self.sampling(i),
            turn=int(self.turn[i]),
            loss_mask=self.loss_mask.row(i).tolist() if self.loss_mask.present(i) else None,
        )

    def by_dataset(self) -> dict[str, np.ndarray]:
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(self.dataset):
            groups.setdefault(name, []).append(i)
        return {k: np.asarray(v) for k, v in sorted(groups.items())}


def _col(table: pa.Table, name: str, default: Any, n: int) -> list:
    if name in table.column_names:
        return table.column(name).to_pylist()
    return [default] * n


def _ids_column(table: pa.Table, name: str, source: str) -> pa.ChunkedArray:
    column = table.column(name)
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(
        kind.value_type
    ):
        raise RecordError("bad_column", f"{source}: column {name} is {kind}, not a list of ints")
    return column


def _stop(value: Any) -> Any:
    """eyas stores matched_stop JSON-encoded (an id or a string); other producers may store
    the stop string itself."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


def _from_arrow(table: pa.Table, source: str) -> SampleTable:
    missing = [c for c in ("id", "prompt_ids", "output_ids") if c not in table.column_names]
    if missing:
        raise RecordError(
            "missing_field", f"{source}: no column(s) {missing}; has {table.column_names}"
        )
    n = table.num_rows
    empty = pa.array([None] * n, type=pa.list_(pa.int8()))
    matched = [_stop(m) for m in _col(table, "matched_stop", None, n)]
    turn = np.asarray(_col(table, "turn", -1, n), dtype=np.int64)

    def js(name: str) -> list:
        return [
            v if isinstance(v, str) or v is None else orjson.dumps(v).decode()
            for v in _col(table, name, None, n)
        ]

    return SampleTable(
        ids=[str(x) for x in table.column("id").to_pylist()],
        dataset=[d or "default" for d in _col(table, "dataset", "default", n)],
        prompt=Ragged.from_arrow(_ids_column(table, "prompt_ids", source)),
        output=Ragged.from_arrow(_ids_column(table, "output_ids", source)),
        loss_mask=Ragged.from_arrow(
            _ids_column(table, "loss_mask", source) if "loss_mask" in table.column_names else empty
        ),
        finish_reason=[f or None for f in _col(table, "finish_reason", None, n)],
        matched_stop=matched,
        turn=turn,
        messages_json=js("messages"),
        tools_json=js("tools"),
        backend=[b or "" for b in _col(table, "backend", "", n)],
        sampling_json=js("sampling"),
        source=source,
    )


def _ids_lists(
    rows: list[dict], key: str, path: Path, lines: list[int], dtype: Any = np.int32
) -> Ragged:
    try:
        return Ragged.from_lists([r.get(key) for r in rows], dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        # only on failure: find the line to name (checking every id up front costs a pass)
        for row, line in zip(rows, lines):
            value = row.get(key)
            ok = value is None or (
                isinstance(value, list)
                and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
            )
            if not ok:
                raise RecordError(
                    "bad_field", f"{path}:{line}: {key} is not a list of token ids"
                ) from exc
        raise RecordError("bad_field", f"{path}: {key}: {exc}") from exc


def _from_jsonl(path: Path) -> SampleTable:
    require_file(path, "sample file")
    rows, lines = [], []
    with open_input(path) as f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = parse_line(line, path, k)
            missing = [c for c in ("id", "prompt_ids", "output_ids") if row.get(c) is None]
            if missing:
                raise RecordError("missing_field", f"{path}:{k} lacks {missing}")
            rows.append(row)
            lines.append(k)

    def js(key: str) -> list:
        return [orjson.dumps(r[key]).decode() if r.get(key) is not None else None for r in rows]

    return SampleTable(
        ids=[str(r["id"]) for r in rows],
        dataset=[r.get("dataset") or "default" for r in rows],
        prompt=_ids_lists(rows, "prompt_ids", path, lines),
        output=_ids_lists(rows, "output_ids", path, lines),
        loss_mask=_ids_lists(rows, "loss_mask", path, lines, np.int8),
        finish_reason=[r.get("finish_reason") or None for r in rows],
        matched_stop=[r.get("matched_stop") for r in rows],
        turn=np.asarray([r.get("turn", -1) for r in rows], dtype=np.int64),
        messages_json=js("messages"),
        tools_json=js("tools"),
        backend=[r.get("backend") or "" for r in rows],
        sampling_json=js("sampling"),
        source=str(path),
    )


def load_table(path: str | Path) -> SampleTable:
    """Load any supported input; the stage manifest, when present, rides along."""
    path = Path(path)
    if path.is_dir() and (path / "generate").is_dir() and not list(path.glob("*.parquet")):
        path = path / "generate"  # a run directory
    manifest: dict = {}
    duplicates = 0
    if path.is_dir():
        manifest = stage_manifest(path)
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise RecordError("no_input", f"{path} holds no Parquet shards")
        try:
            table = pa.concat_tables([read_parquet(f) for f in files], promote_options="default")
        except pa.ArrowInvalid as exc:
            raise RecordError("bad_column", f"{path}: shards with unlike columns ({exc})") from exc
        table, duplicates = _first_of_each_id(table)
        out = _from_arrow(table, str(path))
    elif path.suffix == ".parquet":
        out = _from_arrow(read_parquet(path), str(path))
    elif path.exists():
        out = _from_jsonl(path)
    else:
        raise RecordError("no_input", f"{path} does not exist")
    out.manifest = manifest
    out.duplicates = duplicates
    return out


def _first_of_each_id(table: pa.Table) -> tuple[pa.Table, int]:
    """Several jobs writing one folder can race to commit the same id: keep its first row in
    part-name order (deterministic), drop and count the rest."""
    if "id" not in table.column_names:
        return table, 0
    seen: set = set()
    keep = np.ones(table.num_rows, dtype=bool)
    for k, sid in enumerate(table.column("id").to_pylist()):
        if sid in seen:
            keep[k] = False
        seen.add(sid)
    dropped = int((~keep).sum())
    return (table.filter(pa.array(keep)) if dropped else table), dropped


def read_samples(path: str | Path) -> Iterator[Sample]:
    """Every sample of any supported input, as records."""
    table = load_table(path)
    return (table.sample(i) for i in range(len(table)))


def select_trainable(
    table: SampleTable,
    include_truncated: bool = False,
    quarantined: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[int], Counter]:
    """The one rule for which samples train (training, capture and sample export share it).

    Excluded, each counted by reason: aborted generations; outputs cut at max_new_tokens
    (`finish_length`) and outputs whose producer recorded no finish reason
    (`finish_unrecorded`: a cut cannot be ruled out), unless `include_truncated`; a loss mask
    that does not fit its output; ids in the audit's quarantine; samples with nothing
    supervised.
    """
    keep: list[int] = []
    excluded: Counter = Counter()
    for i in range(len(table)):
        finish = table.finish_reason[i]
        if finish == "abort":
            excluded["finish_abort"] += 1
        elif finish in ("length", None) and not include_truncated:
            excluded["finish_length" if finish else "finish_unrecorded"] += 1
        elif not table.mask_ok(i):
            excluded["bad_loss_mask"] += 1
        elif table.ids[i] in quarantined or table.ids[i].split("#")[0] in quarantined:
            excluded["quarantined"] += 1
        elif not table.supervised(i).any():
            excluded["no_supervised_tokens"] += 1
        else:
            keep.append(i)
    return keep, excluded
