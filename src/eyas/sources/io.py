"""Read source rows from JSONL, JSON arrays, Parquet and `datasets.save_to_disk` folders;
JSONL and JSON arrays may be gzip- or zstd-compressed (`eyas.jsonl.open_input`).

pyarrow is imported when a Parquet or Arrow input is read: the command line imports the
source registry (`eyas.sources.FORMATS`) for its choices and stays light.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from eyas.errors import EyasError
from eyas.jsonl import open_input, read_json_object
from eyas.sources.common import ConversionError

if TYPE_CHECKING:
    import pyarrow as pa


class SourceFileError(EyasError):
    """The input file itself cannot be read (not one bad row: the whole file)."""

    def __init__(self, detail: str):
        super().__init__("bad_source_file", detail)


def _arrow_rows(table: pa.Table) -> Iterator[dict]:
    for batch in table.to_batches(max_chunksize=1024):
        yield from batch.to_pylist()


def _saved_dataset(folder: Path) -> Iterator[dict]:
    import pyarrow as pa

    # save_to_disk writes Arrow IPC *stream* files listed in state.json.
    state = read_json_object(folder / "state.json")
    for entry in state.get("_data_files", []):
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
            raise SourceFileError(
                f"{folder / 'state.json'}: _data_files entry {entry!r} names no file"
            )
        file = folder / entry["filename"]
        try:
            with pa.memory_map(str(file)) as source:
                table = pa.ipc.open_stream(source).read_all()
        except (pa.ArrowException, OSError) as exc:
            raise SourceFileError(f"{file}: not a readable Arrow stream ({exc})") from exc
        yield from _arrow_rows(table)


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
        from eyas.store.samples import read_parquet

        yield from _arrow_rows(read_parquet(path))
        return
    with open_input(path) as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        with open_input(path) as f:
            text = f.read()
        try:
            data = json.loads(text.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SourceFileError(f"{path}: not UTF-8 text ({exc.reason})") from exc
        except json.JSONDecodeError as exc:
            raise SourceFileError(
                f"{path}:{exc.lineno}: not a valid JSON array: {exc.msg} (column {exc.colno})"
            ) from exc
        for item in data:
            yield (
                item
                if isinstance(item, dict)
                else ConversionError(
                    "invalid_json", f"array item is {type(item).__name__}, not an object"
                )
            )
        return
    with open_input(path) as f:
        for raw in f:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield ConversionError("invalid_json", f"not UTF-8 text ({exc.reason})")
                continue
            except json.JSONDecodeError as exc:
                yield ConversionError("invalid_json", f"{exc.msg} at column {exc.colno}")
                continue
            yield (
                obj
                if isinstance(obj, dict)
                else ConversionError("invalid_json", f"line is {type(obj).__name__}, not an object")
            )
