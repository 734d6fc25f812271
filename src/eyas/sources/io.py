"""Read source rows from JSONL, JSON arrays, Parquet and `datasets.save_to_disk` folders."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eyas.errors import EyasError
from eyas.sources.common import ConversionError


class SourceFileError(EyasError):
    """The input file itself cannot be read (not one bad row: the whole file)."""

    def __init__(self, detail: str):
        super().__init__("bad_source_file", detail)


def _arrow_rows(table: pa.Table) -> Iterator[dict]:
    for batch in table.to_batches(max_chunksize=1024):
        yield from batch.to_pylist()


def _saved_dataset(folder: Path) -> Iterator[dict]:
    # save_to_disk writes Arrow IPC *stream* files listed in state.json.
    state = json.loads((folder / "state.json").read_text())
    for entry in state.get("_data_files", []):
        with pa.memory_map(str(folder / entry["filename"])) as source:
            yield from _arrow_rows(pa.ipc.open_stream(source).read_all())


def read_rows(path: str | Path) -> Iterator[dict | ConversionError]:
    """Yield each row as a dict; a line that is not a JSON object yields a ConversionError."""
    path = Path(path)
    if path.is_dir():
        if (path / "state.json").exists():
            yield from _saved_dataset(path)
            return
        if (path / "dataset_dict.json").exists():
            raise SourceFileError(f"{path} is a DatasetDict; point at one split folder")
        raise SourceFileError(f"{path} is a folder but not a datasets.save_to_disk folder")
    if not path.exists():
        raise SourceFileError(f"{path} does not exist")
    if path.suffix == ".parquet":
        yield from _arrow_rows(pq.read_table(path))
        return
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SourceFileError(f"{path}: not a valid JSON array: {exc}") from exc
        for item in data:
            yield (
                item
                if isinstance(item, dict)
                else ConversionError(
                    "invalid_json", f"array item is {type(item).__name__}, not an object"
                )
            )
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                yield ConversionError("invalid_json", f"{exc.msg} at column {exc.colno}")
                continue
            yield (
                obj
                if isinstance(obj, dict)
                else ConversionError("invalid_json", f"line is {type(obj).__name__}, not an object")
            )
