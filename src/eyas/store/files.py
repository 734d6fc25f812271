"""The JSONL files of the stages before and after generation: convert and render outputs with
their sidecars (`X.errors.jsonl`, `X.manifest.json`), and the audit's quarantine list."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson

from eyas.jsonl import open_input, parse_line, plain_name, read_jsonl, require_file
from eyas.records import Conversation, RecordError

QUARANTINE_NAME = "quarantine.jsonl"
QUARANTINE_FIELDS = ("id", "dataset", "check", "severity", "reason")


def sidecar(path: str | Path, suffix: str) -> Path:
    """`out.jsonl` (or a compressed `out.jsonl.gz`) -> `out<suffix>` (e.g. `.errors.jsonl`,
    `.manifest.json`)."""
    path = Path(path)
    return path.with_name(plain_name(path).removesuffix(".jsonl") + suffix)


def rendered_files(path: str | Path) -> list[Path]:
    """The rendered JSONL files of a render output file, a `rendered/` folder or a prepare
    stage directory."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise RecordError("no_input", f"{path} does not exist")
    root = path / "rendered" if (path / "rendered").is_dir() else path
    files = sorted(
        p
        for pattern in ("*.jsonl", "*.jsonl.gz", "*.jsonl.zst")
        for p in root.glob(pattern)
        if not plain_name(p).endswith("errors.jsonl")
        and not plain_name(p).endswith(QUARANTINE_NAME)
    )
    if not files:
        raise RecordError("no_input", f"no rendered .jsonl files in {path} (run eyas prepare)")
    return files


def read_rendered(path: str | Path, *, conversations: bool = False) -> Iterator[tuple[Path, dict]]:
    """(file, row) for every rendered prompt; each row must carry `id` and `prompt_ids` (a
    list of ids), and with `conversations` be a whole conversation (`Conversation.from_dict`)."""
    for file in rendered_files(path):
        require_file(file, "rendered JSONL file")
        with open_input(file) as f:
            for k, line in enumerate(f, 1):
                if not line.strip():
                    continue
                row = parse_line(line, file, k)
                if not isinstance(row.get("prompt_ids"), list) or "id" not in row:
                    raise RecordError(
                        "not_rendered", f"{file}:{k}: lines need id and prompt_ids (eyas render)"
                    )
                if conversations:
                    try:
                        Conversation.from_dict(row)
                    except RecordError as exc:
                        raise RecordError(exc.reason, f"{file}:{k}: {exc.detail}") from exc
                yield file, row


def quarantine_path(data: str | Path) -> Path:
    """Where the audit of `data` writes its quarantine list, and where training and export
    look for it by default: inside a stage directory, or beside a sample file."""
    data = Path(data)
    if data.is_dir():
        return data / QUARANTINE_NAME
    return (
        sidecar(data, "." + QUARANTINE_NAME)
        if data.suffix == ".jsonl"
        else Path(str(data) + "." + QUARANTINE_NAME)
    )


def read_quarantine(path: str | Path) -> dict[str, dict]:
    """id -> the first quarantine row for that id."""
    out: dict[str, dict] = {}
    for k, row in enumerate(read_jsonl(path)):
        if not isinstance(row.get("id"), str):
            raise RecordError(
                "missing_field", f"{path}: quarantine row {k + 1} has no id (eyas audit writes it)"
            )
        out.setdefault(row["id"], row)
    return out


def write_quarantine(path: str | Path, rows: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        for row in rows:
            f.write(orjson.dumps({k: row[k] for k in QUARANTINE_FIELDS}) + b"\n")
    tmp.replace(path)
    return path


def quarantined_ids(
    data: str | Path, quarantine: str | Path | None = None, include: bool = False
) -> tuple[frozenset[str], Path | None]:
    """The ids a consumer of `data` skips: those in `quarantine` (default: the audit's list
    beside the data, if one was written), or none when `include`."""
    if include:
        return frozenset(), None
    path = Path(quarantine) if quarantine else quarantine_path(data)
    if not path.exists():
        if quarantine:
            raise RecordError("no_input", f"quarantine file {path} does not exist")
        return frozenset(), None
    return frozenset(read_quarantine(path)), path
