"""`eyas convert`: a source file to canonical conversation JSONL plus a row-error file."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from eyas.errors import EyasError
from eyas.records import Conversation, RowError
from eyas.sources import FORMATS, convert_rows, detect_format, read_rows


@dataclass
class ConvertResult:
    format: str
    detected: bool
    num_rows: int = 0
    num_converted: int = 0
    reasons: Counter = field(default_factory=Counter)
    notes: Counter = field(default_factory=Counter)


def errors_path(out: Path) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + ".errors.jsonl")


def convert_file(
    in_path: str | Path, out_path: str | Path, fmt: str, dataset: str
) -> ConvertResult:
    """Convert every row; rejected rows go to `OUT.errors.jsonl` with a reason code."""
    in_path, out_path = Path(in_path), Path(out_path)
    detected = fmt == "auto"
    if detected:
        fmt = detect_format(read_rows(in_path), source=str(in_path))
    if fmt not in FORMATS:
        raise EyasError(
            "bad_flag", f"unknown format {fmt!r}; choose one of {sorted(FORMATS)} or auto"
        )
    result = ConvertResult(fmt, detected)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("wb") as out, errors_path(out_path).open("wb") as err:
        for item in convert_rows(read_rows(in_path), fmt, dataset, str(in_path)):
            result.num_rows += 1
            if isinstance(item, RowError):
                result.reasons[item.reason] += 1
                err.write(orjson.dumps(item.to_dict()) + b"\n")
            else:
                assert isinstance(item, Conversation)
                result.num_converted += 1
                for note in item.notes:
                    result.notes[note.split(" ", 1)[1] if note[:1].isdigit() else note] += 1
                out.write(orjson.dumps(item.to_dict()) + b"\n")
    return result
