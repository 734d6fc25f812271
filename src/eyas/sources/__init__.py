"""Source converters: one module per source format, each `convert(row) -> Draft`.

`convert_rows` turns rows into canonical `Conversation`s or `RowError`s; nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path

from eyas.records import Conversation, RecordError, RowError
from eyas.sources import (
    bfcl,
    glaive,
    hermes,
    humaneval,
    mt_bench,
    openai,
    sharegpt,
    ultrachat,
    xlam,
)
from eyas.sources.common import ConversionError, Draft
from eyas.sources.io import SourceFileError, read_rows

FORMATS: dict[str, Callable[[dict], Draft]] = {
    "glaive": glaive.convert,
    "hermes": hermes.convert,
    "xlam": xlam.convert,
    "sharegpt": sharegpt.convert,
    "ultrachat": ultrachat.convert,
    "openai": openai.convert,
    "bfcl": bfcl.convert,
    "mt_bench": mt_bench.convert,
    "humaneval": humaneval.convert,
}
# Formats whose rows refer to files beside the source file (BFCL's multi-turn function docs):
# `(rows, source path) -> rows` with what the converter needs attached.
SIDE_FILES: dict[str, Callable[[Iterable, Path], Iterable]] = {
    "bfcl": bfcl.with_side_files,
}

_HERMES_MARKERS = ("<tools>", "<tool_call>", "<tool_response>")


def _guess(row: dict) -> str | None:
    if isinstance(row.get("chat"), str) and "system" in row:
        return "glaive"
    if "query" in row and "answers" in row:
        return "xlam"
    if isinstance(row.get("conversations"), list):
        values = [t.get("value", "") for t in row["conversations"] if isinstance(t, dict)]
        if any(m in str(v) for v in values for m in _HERMES_MARKERS):
            return "hermes"
        return "sharegpt"
    if isinstance(row.get("data"), list):
        return "ultrachat"
    if isinstance(row.get("messages"), list):
        if "prompt_id" in row:
            return "ultrachat"
        return "openai"
    return None


def detect_format(
    rows: Iterable[dict | ConversionError], sample: int = 20, *, source: str = ""
) -> str:
    """The format most of the first `sample` rows look like; raises if none is recognised
    (naming `source`, the file the rows come from)."""
    votes: dict[str, int] = {}
    for row in islice(rows, sample):
        if isinstance(row, dict) and (fmt := _guess(row)):
            votes[fmt] = votes.get(fmt, 0) + 1
    if not votes:
        where = f"{source}: " if source else ""
        raise SourceFileError(
            f"{where}cannot detect the source format from the first {sample} rows; name it"
        )
    # Hermes rows without a tool turn look like ShareGPT; any Hermes marker wins.
    if "hermes" in votes:
        return "hermes"
    return max(votes, key=votes.__getitem__)


def convert_row(fmt: str, row: dict, dataset: str, source: dict) -> Conversation:
    draft = FORMATS[fmt](row)
    draft.note_undeclared_calls()
    try:
        return Conversation.create(dataset, draft.messages, draft.tools, source, draft.notes)
    except RecordError as exc:
        raise ConversionError.wrap(exc) from exc


def convert_rows(
    rows: Iterable[dict | ConversionError], fmt: str, dataset: str, file: str = ""
) -> Iterator[Conversation | RowError]:
    seen: dict[str, int] = {}
    if file and fmt in SIDE_FILES:
        rows = SIDE_FILES[fmt](rows, Path(file))
    for index, row in enumerate(rows):
        if isinstance(row, ConversionError):
            yield RowError(index, row.reason, row.detail)
            continue
        try:
            conv = convert_row(fmt, row, dataset, {"format": fmt, "file": file, "row": index})
            if conv.id in seen:
                # Same dataset and content means the same id; keeping both would train on the
                # row twice and break resume-by-id.
                yield RowError(
                    index, "duplicate_conversation", f"same content as row {seen[conv.id]}"
                )
                continue
            seen[conv.id] = index
            yield conv
        except ConversionError as exc:
            yield RowError(index, exc.reason, exc.detail)
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            # A row shaped in a way no converter anticipated: keep it, never stop the run.
            yield RowError(index, "malformed_row", f"{type(exc).__name__}: {exc}")


__all__ = [
    "FORMATS",
    "ConversionError",
    "SourceFileError",
    "convert_row",
    "convert_rows",
    "detect_format",
    "read_rows",
]
