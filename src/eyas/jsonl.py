"""JSON and JSONL files (orjson; one object a line). A file that cannot be read is one
`EyasError` naming `FILE:LINE` and what is wrong (reason `invalid_json`), never a decoder's
traceback.

Inputs may be gzip- or zstd-compressed (`.jsonl.gz`, `.jsonl.zst`: how datasets ship):
`open_input` tells them by their first bytes, not by the name, and every reader of JSONL input
goes through it. zstd needs the `zstandard` package (a dependency of eyas).
"""

from __future__ import annotations

import gzip
import io
import os
import secrets
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import orjson

from eyas.errors import EyasError, unreadable

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
COMPRESSED_SUFFIXES = (".gz", ".zst")


def compression_of(path: str | Path) -> str | None:
    """ "gzip", "zstd" or None (plain), by the file's first bytes."""
    with Path(path).open("rb") as f:
        head = f.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


class _Truncated(EOFError):
    pass


class _ZstdStream(io.RawIOBase):
    """A zstd file decompressed frame after frame (`pzstd` and concatenated files hold
    several). zstandard's own `stream_reader` ends quietly on a file cut mid-frame; this
    raises, so a cut download loses no rows silently."""

    def __init__(self, raw: IO[bytes], zstandard: Any):
        self.raw, self.zstandard = raw, zstandard
        self.frame = zstandard.ZstdDecompressor().decompressobj()
        self.fed = False  # the current frame has input
        self.pending, self.offset = b"", 0  # decompressed bytes not yet read

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self.offset == len(self.pending):
            self.pending, self.offset = b"", 0
            chunk = self.raw.read(1 << 16)
            if not chunk:
                if self.fed and not self.frame.eof:
                    raise _Truncated("the file ends inside a zstd frame")
                return 0
            while chunk:
                if self.frame.eof:
                    self.frame = self.zstandard.ZstdDecompressor().decompressobj()
                    self.fed = False
                self.fed = True
                self.pending += self.frame.decompress(chunk)
                chunk = self.frame.unused_data if self.frame.eof else b""
        n = min(len(buffer), len(self.pending) - self.offset)
        buffer[:n] = self.pending[self.offset : self.offset + n]
        self.offset += n
        return n


def _zstd_reader(raw: IO[bytes], path: Path) -> tuple[IO[bytes], type[Exception]]:
    """A line-iterable reader of a zstd file, and the error zstandard raises on damage."""
    try:
        import zstandard
    except ImportError as exc:
        raise EyasError(
            "missing_package",
            f"{path} is zstd-compressed: reading it needs `pip install zstandard`",
        ) from exc
    return io.BufferedReader(_ZstdStream(raw, zstandard)), zstandard.ZstdError


@contextmanager
def open_input(path: str | Path) -> Iterator[IO[bytes]]:
    """`path` opened for reading as bytes, decompressed if it is gzip or zstd. A damaged
    compressed file (truncated, corrupt) is `invalid_gzip` / `invalid_zstd` naming the file,
    raised where the reader meets the damage."""
    path = Path(path)
    kind = compression_of(path)
    raw = path.open("rb")
    try:
        if kind is None:
            yield raw
            return
        damage: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error)
        if kind == "gzip":
            stream: IO[bytes] = gzip.GzipFile(fileobj=raw)
        else:
            stream, zstd_error = _zstd_reader(raw, path)
            damage = (*damage, zstd_error)
        try:
            yield stream
        except damage as exc:
            raise unreadable(path, kind, exc) from exc
    finally:
        raw.close()


def plain_name(path: str | Path) -> str:
    """The file name without a compression suffix (`x.jsonl.gz` -> `x.jsonl`)."""
    name = Path(path).name
    for suffix in COMPRESSED_SUFFIXES:
        name = name.removesuffix(suffix)
    return name


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
    with open_input(path) as f:
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
    # a tmp name of its own: several jobs may rewrite one run's manifest at once
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(3)}.tmp")
    tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    tmp.replace(path)
