"""Captured target hidden states: the `eyas capture` stage's output, read by `eyas train
--hidden-states`.

A capture directory holds `part-<job>-NNNNN.safetensors` shards, the job records under `jobs/`,
and the combined `manifest.json` and `errors.jsonl`; several capture jobs may write one folder
at once (`eyas.store.runs`).
Each shard stores its samples back to back:
- `hidden_states` [tokens, L, H]: per token of `prompt_ids + output_ids`, the target's aux
  layers (in the manifest's order) and, last, its final layer before the final norm;
- `input_ids` [tokens] int32 and `loss_mask` [tokens] int8 (1 = trained: 0 over the prompt,
  the sample's supervision over the output);
- `offsets` [n + 1] int64: sample i is rows offsets[i]:offsets[i+1];
- metadata `ids` and `datasets` (JSON lists).
Shards are written to a temporary name, fsynced and renamed, so a kill leaves whole shards;
resume reads the ids in the committed shards' metadata.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from eyas.errors import EyasError
from eyas.store.runs import clean_stale_tmps, new_job_id, part_job, stage_manifest


def capture_shards(capture_dir: str | Path) -> list[Path]:
    return sorted(Path(capture_dir).glob("part-*.safetensors"))


def _metadata(path: Path) -> dict[str, str]:
    try:
        with safe_open(str(path), "pt") as st:
            return st.metadata() or {}
    except (SafetensorError, OSError) as exc:
        raise EyasError(
            "invalid_safetensors", f"{path}: not a readable safetensors file ({exc})"
        ) from exc


def _listed(path: Path, meta: dict[str, str], key: str) -> list:
    try:
        value = json.loads(meta[key])
    except (KeyError, json.JSONDecodeError) as exc:
        raise EyasError(
            "invalid_capture", f"{path}: metadata {key!r} missing or not JSON: not an eyas capture"
        ) from exc
    if not isinstance(value, list):
        raise EyasError("invalid_capture", f"{path}: metadata {key!r} is not a list")
    return value


_QUOTE, _WHITESPACE = ord('"'), np.array([32, 9, 10, 13], np.uint8)


def _string_array(path: Path, meta: dict[str, str], key: str) -> np.ndarray:
    """A metadata JSON list of strings as one fixed-width utf-8 bytes array, parsed with numpy:
    no Python object per element. At ~50-token samples the allocator's residue of a str per
    sample id kept more memory resident than the tokens themselves. A list with escapes (or
    anything but plain strings) goes through the JSON parser instead."""
    text = meta.get(key)
    raw = np.frombuffer(text.encode(), np.uint8) if isinstance(text, str) else None
    if raw is not None and not (raw == ord("\\")).any():
        quote = raw == _QUOTE
        at = np.flatnonzero(quote)
        if len(at) % 2 == 0:
            inside = (np.cumsum(quote) % 2 == 1) & ~quote
            between = raw[~inside & ~quote & ~np.isin(raw, _WHITESPACE)]
            n = len(at) // 2
            shape = b"[" + b"," * max(n - 1, 0) + b"]"
            if between.tobytes() == shape:
                starts, lengths = at[0::2] + 1, at[1::2] - at[0::2] - 1
                width = max(int(lengths.max()) if n else 1, 1)
                col = np.arange(width)
                fill = col < lengths[:, None]
                out = np.zeros((n, width), np.uint8)
                out[fill] = raw[(starts[:, None] + col)[fill]]
                return out.view(f"S{width}").reshape(n)
    value = _listed(path, meta, key)
    if not all(isinstance(x, str) for x in value):
        raise EyasError("invalid_capture", f"{path}: metadata {key!r} is not a list of strings")
    return np.array([x.encode() for x in value], dtype=bytes).reshape(len(value))


def captured_ids(capture_dir: str | Path) -> set[str]:
    ids: set[str] = set()
    for path in capture_shards(capture_dir):
        ids.update(_listed(path, _metadata(path), "ids"))
    return ids


@dataclass
class CapturedRow:
    """One captured sample: where its rows live, and its ids and mask."""

    id: str
    dataset: str
    shard: Path
    start: int
    end: int
    input_ids: list[int]
    loss_mask: list[int]


class CaptureWriter:
    """Buffers captured samples and commits them as atomic safetensors shards named after this
    job (`part-<job>-NNNNN`), so several capture jobs can write one folder (`eyas.store.runs`).

    `add` only appends under a short lock; the shard it completes is taken out of the buffer
    and written by the caller's thread, so several shards can be serialised and fsynced at once
    while the requests in flight carry on."""

    def __init__(
        self,
        capture_dir: str | Path,
        shard_size: int,
        dtype: torch.dtype,
        job_id: str | None = None,
    ):
        self.dir = Path(capture_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.shard_size = shard_size
        self.dtype = dtype
        self.job_id = job_id or new_job_id()
        clean_stale_tmps(self.dir)  # shards being written when their (local) job died
        self._next = 0
        self._rows: list[tuple[str, str, torch.Tensor, list[int], list[int]]] = []
        self._lock = threading.Lock()
        self.num_committed = 0

    def add(
        self, sample_id: str, dataset: str, states: torch.Tensor, ids: list[int], mask: list[int]
    ) -> Path | None:
        """states: [T, L, H] for the T = len(ids) tokens."""
        if states.shape[0] != len(ids) or len(mask) != len(ids):
            raise ValueError(f"{sample_id}: {states.shape[0]} states for {len(ids)} ids")
        row = (sample_id, dataset, states.to(self.dtype), ids, mask)
        with self._lock:
            self._rows.append(row)
            full = len(self._rows) >= self.shard_size
        return self.flush() if full else None

    def _take(self, name: str | None) -> tuple[list, Path] | None:
        with self._lock:
            if not self._rows:
                return None
            rows, self._rows = self._rows, []
            final = self.dir / (name or f"part-{self.job_id}-{self._next:05d}.safetensors")
            self._next += name is None
            return rows, final

    def flush(self, name: str | None = None) -> Path | None:
        """Commit the buffered samples as one shard (`name`: its file name instead of the next
        `part-<job>-NNNNN`)."""
        taken = self._take(name)
        if taken is None:
            return None
        rows, final = taken
        lengths = [len(r[3]) for r in rows]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tensors = {
            "hidden_states": torch.cat([r[2] for r in rows]).contiguous(),
            "input_ids": torch.tensor([t for r in rows for t in r[3]], dtype=torch.int32),
            "loss_mask": torch.tensor([m for r in rows for m in r[4]], dtype=torch.int8),
            "offsets": torch.from_numpy(offsets),
        }
        meta = {
            "ids": json.dumps([r[0] for r in rows]),
            "datasets": json.dumps([r[1] for r in rows]),
        }
        tmp = self.dir / f".{final.stem}.tmp"
        save_file(tensors, str(tmp), metadata=meta)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)  # the commit point
        with self._lock:
            self.num_committed += len(rows)
        return final


def shard_index(path: Path) -> tuple[list[str], list[int]]:
    """(ids, token counts) of one committed shard, from its metadata and offsets only."""
    ids = _listed(path, _metadata(path), "ids")
    with safe_open(str(path), "pt") as st:
        offsets = st.get_tensor("offsets").tolist()
    return ids, np.diff(offsets).tolist()


def capture_counts(capture_dir: str | Path) -> tuple[dict[str, int], dict[str | None, set[str]]]:
    """(samples and tokens captured, each id once, and the rows of ids captured twice;
    job id -> the ids its shards hold)."""
    by_job: dict[str | None, set[str]] = {}
    seen: set[str] = set()
    tokens = duplicates = 0
    for path in capture_shards(capture_dir):
        ids, lengths = shard_index(path)
        by_job.setdefault(part_job(path.name), set()).update(ids)
        for sid, n in zip(ids, lengths):
            if sid in seen:
                duplicates += 1
                continue
            seen.add(sid)
            tokens += n
    return {"samples": len(seen), "tokens": tokens, "duplicates": duplicates}, by_job


def read_shard_rows(path: Path) -> list[CapturedRow]:
    """The samples of one committed shard (ids and masks; the states stay on disk)."""
    meta = _metadata(path)
    ids, datasets = _listed(path, meta, "ids"), _listed(path, meta, "datasets")
    with safe_open(str(path), "pt") as st:
        missing = {"offsets", "input_ids", "loss_mask", "hidden_states"} - set(st.keys())
        if missing:
            raise EyasError("invalid_capture", f"{path}: no tensor(s) {sorted(missing)}")
        offsets = st.get_tensor("offsets").tolist()
        input_ids = st.get_tensor("input_ids").tolist()
        mask = st.get_tensor("loss_mask").tolist()
    if len(offsets) != len(ids) + 1 or len(datasets) != len(ids):
        raise EyasError(
            "invalid_capture", f"{path}: {len(ids)} ids for {len(offsets) - 1} offset rows"
        )
    return [
        CapturedRow(
            sid,
            ds,
            path,
            offsets[k],
            offsets[k + 1],
            input_ids[offsets[k] : offsets[k + 1]],
            mask[offsets[k] : offsets[k + 1]],
        )
        for k, (sid, ds) in enumerate(zip(ids, datasets))
    ]


def read_capture_index(capture_dir: str | Path) -> tuple[list[CapturedRow], dict]:
    """Every captured sample, once (the first in part-name order when two jobs raced on an
    id; the ids and masks, the states stay on disk), and the manifest."""
    capture_dir = Path(capture_dir)
    manifest = stage_manifest(capture_dir) if capture_dir.is_dir() else {}
    if not manifest:
        raise EyasError("no_input", f"{capture_dir} is not an eyas capture (no manifest.json)")
    rows: list[CapturedRow] = []
    seen: set[str] = set()
    for path in capture_shards(capture_dir):
        for row in read_shard_rows(path):
            if row.id not in seen:
                seen.add(row.id)
                rows.append(row)
    if not rows:
        raise EyasError("no_input", f"{capture_dir} holds no captured shards")
    return rows, manifest


@dataclass
class ShardOffsets:
    """One shard's samples without their tokens (read later, with `read_shard_tokens`)."""

    path: Path
    ids: np.ndarray  # [n] fixed-width utf-8 bytes
    datasets: np.ndarray  # [n] fixed-width utf-8 bytes
    offsets: np.ndarray  # [n + 1] int64
    duplicate: np.ndarray | None = None  # [n] bool: an id an earlier shard holds


def read_shard_offsets(path: Path) -> ShardOffsets:
    meta = _metadata(path)
    ids, datasets = _string_array(path, meta, "ids"), _string_array(path, meta, "datasets")
    del meta
    with safe_open(str(path), "np") as st:
        missing = {"offsets", "input_ids", "loss_mask", "hidden_states"} - set(st.keys())
        if missing:
            raise EyasError("invalid_capture", f"{path}: no tensor(s) {sorted(missing)}")
        offsets = st.get_tensor("offsets").astype(np.int64)
        tokens = st.get_slice("input_ids").get_shape()[0]
        masks = st.get_slice("loss_mask").get_shape()[0]
    if len(offsets) != len(ids) + 1 or len(datasets) != len(ids):
        raise EyasError(
            "invalid_capture", f"{path}: {len(ids)} ids for {len(offsets) - 1} offset rows"
        )
    if offsets[-1] != tokens or masks != tokens:
        raise EyasError(
            "invalid_capture", f"{path}: offsets end at {offsets[-1]} of {tokens} tokens"
        )
    return ShardOffsets(path, ids, datasets, offsets)


def read_shard_tokens(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A shard's token ids (int32) and loss mask (int8), all samples back to back."""
    with safe_open(str(path), "np") as st:
        return st.get_tensor("input_ids"), st.get_tensor("loss_mask")


def read_shard_tokens_into(path: Path, ids_out: np.ndarray, mask_out: np.ndarray) -> None:
    """Read a shard's `input_ids` (I32) and `loss_mask` (I8) straight into the given arrays
    (same lengths, int32 and uint8): no per-shard copy, whose freed memory would stay resident
    between the arrays that are kept. The safetensors layout: an 8-byte little-endian header
    size, the JSON header with each tensor's dtype and byte range, then the data."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        for name, dtype, out in (("input_ids", "I32", ids_out), ("loss_mask", "I8", mask_out)):
            info = header.get(name) or {}
            start, end = info.get("data_offsets", (0, -1))
            if info.get("dtype") != dtype or end - start != out.nbytes:
                raise EyasError(
                    "invalid_capture", f"{path}: {name} is not {dtype} of {len(out)} tokens"
                )
            f.seek(8 + size + start)
            if f.readinto(memoryview(out).cast("B")) != out.nbytes:
                raise EyasError("invalid_capture", f"{path}: {name} is cut short")


def read_capture_index_arrays(capture_dir: str | Path) -> tuple[list[ShardOffsets], dict]:
    """What training indexes a capture from: per shard, the sample ids and offsets (the
    tokens are read once, into the packed index; the states stay on disk)."""
    capture_dir = Path(capture_dir)
    manifest = stage_manifest(capture_dir) if capture_dir.is_dir() else {}
    if not manifest:
        raise EyasError("no_input", f"{capture_dir} is not an eyas capture (no manifest.json)")
    shards = [read_shard_offsets(path) for path in capture_shards(capture_dir)]
    if not shards:
        raise EyasError("no_input", f"{capture_dir} holds no captured shards")
    # an id two jobs raced on: the first in part-name order, as above (np.unique's index is
    # the first occurrence; no set of Python strings)
    every = np.concatenate([np.zeros(0, "S1"), *(s.ids for s in shards)])
    duplicate = np.ones(len(every), dtype=bool)
    duplicate[np.unique(every, return_index=True)[1]] = False
    del every
    at = 0
    for shard in shards:
        shard.duplicate = duplicate[at : at + len(shard.ids)].copy()
        at += len(shard.ids)
    return shards, manifest


class StateReader:
    """Reads captured rows ([T, L, H] slices) without loading whole shards. Shards stay open
    (least recently used closed first): a shuffled batch touches many shards, and reopening
    one parses its header, every sample id included."""

    def __init__(self, max_open: int = 512) -> None:
        self._open: OrderedDict[Path, object] = OrderedDict()
        self.max_open = max_open

    def read(self, row: CapturedRow, length: int | None = None) -> torch.Tensor:
        handle = self._open.get(row.shard)
        if handle is None:
            while len(self._open) >= self.max_open:
                self._open.popitem(last=False)
            handle = self._open[row.shard] = safe_open(str(row.shard), "pt")
        else:
            self._open.move_to_end(row.shard)
        end = row.end if length is None else row.start + length
        return handle.get_slice("hidden_states")[row.start : end]
