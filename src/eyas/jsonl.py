"""JSON and JSONL files (orjson; one object a line). A file that cannot be read is one
`EyasError` naming `FILE:LINE` and what is wrong (reason `invalid_json`), never a decoder's
traceback."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from eyas.errors import EyasError


def require_file(path: Path, what: str = "file") -> None:
    """A readable path: missing (`no_input`) and folders (`not_a_file`) are user errors."""
    if not path.exists():
        raise EyasError("no_input", f"{path} does not exist")
    if path.is_dir():
        raise EyasError("not_a_file", f"{path} is a folder, not a {what}")


def invalid_json(path: str | Path, line: int, exc: orjson.JSONDecodeError) -> EyasError:
    """The error for `exc` at `line` of `path` (orjson's own line and column are those of the
    text it was given)."""
    return EyasError(
        "invalid_json", f"{path}:{line}: not valid JSON: {exc.msg} (column {exc.colno})"
    )


def parse_line(line: bytes, path: str | Path, lineno: int) -> dict:
    """One JSONL line as an object."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise invalid_json(path, lineno, exc) from exc
    if not isinstance(obj, dict):
        raise EyasError(
            "invalid_json", f"{path}:{lineno}: a JSON {type(obj).__name__}, not an object"
        )
    return obj


def read_jsonl(path: str | Path) -> Iterator[dict]:
    """Each non-blank line as an object."""
    path = Path(path)
    require_file(path, "JSONL file")
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield parse_line(line, path, lineno)


def read_json(path: str | Path) -> Any:
    """A whole JSON document."""
    path = Path(path)
    require_file(path, "JSON file")
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise invalid_json(path, exc.lineno, exc) from exc


def read_json_object(path: str | Path) -> dict:
    """A JSON document that must be an object (configs, manifests)."""
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise EyasError("invalid_json", f"{path}:1: a JSON {type(obj).__name__}, not an object")
    return obj


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> int:
    n = 0
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for row in rows:
            f.write(orjson.dumps(row) + b"\n")
            n += 1
    return n


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    tmp.replace(path)
