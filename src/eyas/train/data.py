"""Training sequences from samples: `prompt_ids + output_ids`, token for token, with a mask.

Nothing is re-tokenized or re-rendered here (bug class #30): the sequence is exactly what was
sent and sampled. `supervised[k] = 1` iff token k is a generated token the drafter must learn
(every output token, or the sample's `loss_mask`); prompt tokens are never supervised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eyas.errors import EyasError
from eyas.store import load_table, select_trainable
from eyas.store.captures import (
    CapturedRow,
    read_capture_index_arrays,
    read_shard_tokens,
    read_shard_tokens_into,
)


@dataclass
class Sequence:
    id: str
    dataset: str
    ids: list[int]
    supervised: list[int]
    source: CapturedRow | None = None  # where captured target states for it are stored


@dataclass
class DataReport:
    loaded: int = 0
    used: int = 0
    excluded: Counter = field(default_factory=Counter)
    truncated: int = 0
    lengths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))

    def as_dict(self) -> dict:
        lengths = np.sort(self.lengths)
        n = len(lengths)
        return {
            "loaded": self.loaded,
            "used": self.used,
            "excluded": dict(self.excluded),
            "truncated": self.truncated,
            "max_len_seen": int(lengths[-1]) if n else 0,
            "p99_len": int(lengths[min(n - 1, int(0.99 * n))]) if n else 0,
        }


class SequenceIndex:
    """Every training sequence, packed in arrays: sequence i is `tokens[offsets[i]:offsets[i+1]]`
    (int32) with `supervised` over the same span (uint8), plus its id, dataset and, for captured
    data, where its states are (shard number and first row). About 5 bytes per token and ~40 per
    sequence, instead of two Python lists per sequence (26-31 bytes per token measured).
    `index[i]` builds one `Sequence` (lists) for the batch that trains it."""

    def __init__(
        self,
        sample_ids: np.ndarray,  # fixed-width utf-8 bytes
        dataset_names: list[str],
        dataset_codes: np.ndarray,
        offsets: np.ndarray,
        tokens: np.ndarray,
        supervised: np.ndarray,
        shards: list[Path] | None = None,
        shard_of: np.ndarray | None = None,
        row_start: np.ndarray | None = None,
    ):
        self._ids = sample_ids
        self.dataset_names = dataset_names
        self._dataset = dataset_codes
        self.offsets = offsets.astype(np.int64, copy=False)
        self.lengths = np.diff(self.offsets).astype(np.int32)
        self.tokens = tokens
        self.supervised = supervised
        self.shards = shards
        self.shard_of = shard_of
        self.row_start = row_start

    def __len__(self) -> int:
        return len(self.lengths)

    def id(self, i: int) -> str:
        return self._ids[i].decode()

    def sample_ids(self) -> list[str]:
        return [x.decode() for x in self._ids]

    def __getitem__(self, i: int) -> Sequence:
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        ids, sup = self.tokens[a:b].tolist(), self.supervised[a:b].tolist()
        source = None
        if self.shards is not None:
            start = int(self.row_start[i])
            shard = self.shards[int(self.shard_of[i])]
            source = CapturedRow(self.id(i), "", shard, start, start + b - a, ids, sup)
        return Sequence(self.id(i), self.dataset_names[self._dataset[i]], ids, sup, source)

    def __iter__(self) -> Iterator[Sequence]:
        return (self[i] for i in range(len(self)))

    def nbytes(self) -> int:
        """What the index holds in arrays (the Python objects around them are fixed-size)."""
        arrays = [self._ids, self._dataset, self.offsets, self.lengths, self.tokens]
        arrays += [self.supervised, self.shard_of, self.row_start]
        return sum(a.nbytes for a in arrays if a is not None)


@dataclass
class _Chunk:
    ids: np.ndarray  # kept sample ids, utf-8 bytes
    datasets: np.ndarray  # kept samples' dataset codes
    lengths: np.ndarray  # kept lengths after the policy
    row_start: np.ndarray  # kept samples' first row in their chunk
    take: np.ndarray | None  # token mask of what is kept (None: every token)
    load: Callable[[], tuple[np.ndarray, np.ndarray]]  # (token ids, supervision) of the chunk
    shard: int | None
    # reads the chunk's tokens and supervision straight into two arrays (nothing cut only)
    load_into: Callable[[np.ndarray, np.ndarray], None] | None = None


class _Packer:
    """Two passes: the length policy on each chunk's offsets (a shard, or a run of samples),
    then the tokens and masks read straight into arrays allocated once (no concatenation of
    per-chunk copies, which left freed-but-resident memory behind)."""

    def __init__(self, max_len: int, length_policy: str, report: DataReport):
        if length_policy not in ("skip", "truncate"):
            raise ValueError("length_policy is 'skip' or 'truncate'")
        self.max_len, self.policy, self.report = max_len, length_policy, report
        self.chunks: list[_Chunk] = []
        self.dataset_code: dict[str, int] = {}

    def add(
        self,
        ids: list[str] | np.ndarray,
        datasets: list[str] | np.ndarray,
        offsets: np.ndarray,
        load: Callable[[], tuple[np.ndarray, np.ndarray]],
        shard: int | None = None,
        load_into: Callable[[np.ndarray, np.ndarray], None] | None = None,
        duplicate: np.ndarray | None = None,
    ) -> None:
        """`duplicate`: samples left out as already packed (not counted as excluded)."""
        lengths = np.diff(offsets)
        unique = np.ones(len(lengths), dtype=bool) if duplicate is None else ~duplicate
        over = (lengths > self.max_len) & unique
        keep = unique & ~over if self.policy == "skip" else unique
        if self.policy == "skip":
            self.report.excluded["over_max_len"] += int(over.sum())
        else:
            self.report.truncated += int(over.sum())
        take = None
        if over.any() or not unique.all():  # keep each kept sequence's first max_len tokens
            pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths)
            limit = np.repeat(np.where(keep, np.minimum(lengths, self.max_len), 0), lengths)
            take = pos < limit
        kept = np.flatnonzero(keep)
        if isinstance(ids, np.ndarray):  # fixed-width bytes already: no object per sample
            kept_ids = ids[kept]
            names, inverse = np.unique(datasets[kept], return_inverse=True)
            code_of = [
                self.dataset_code.setdefault(x.decode(), len(self.dataset_code)) for x in names
            ]
            codes = np.array(code_of, dtype=np.uint16)[inverse.reshape(-1)]
        else:
            kept_ids = np.array([ids[k].encode() for k in kept], dtype=bytes)
            codes = [
                self.dataset_code.setdefault(datasets[k], len(self.dataset_code)) for k in kept
            ]
        self.chunks.append(
            _Chunk(
                kept_ids.reshape(len(kept)),
                np.array(codes, dtype=np.uint16).reshape(len(kept)),
                np.minimum(lengths, self.max_len)[keep].astype(np.int64),
                offsets[:-1][kept].astype(np.int64),
                take,
                load,
                shard,
                load_into,
            )
        )

    def finish(self, shards: list[Path] | None = None) -> SequenceIndex:
        lengths = np.concatenate([np.zeros(0, np.int64), *(c.lengths for c in self.chunks)])
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = np.empty(int(offsets[-1]), dtype=np.int32)
        sup = np.empty(int(offsets[-1]), dtype=np.uint8)
        at = 0
        for c in self.chunks:
            if c.take is None and c.load_into is not None:
                n = int(c.lengths.sum())
                c.load_into(tokens[at : at + n], sup[at : at + n])
                at += n
                continue
            chunk_ids, chunk_sup = c.load()
            if c.take is not None:
                chunk_ids, chunk_sup = chunk_ids[c.take], chunk_sup[c.take]
            n = len(chunk_ids)
            tokens[at : at + n], sup[at : at + n] = chunk_ids, chunk_sup
            at += n
        width = max((c.ids.itemsize for c in self.chunks if len(c.ids)), default=1)
        index = SequenceIndex(
            np.concatenate([np.zeros(0, f"S{width}"), *(c.ids for c in self.chunks)]),
            list(self.dataset_code),
            np.concatenate([np.zeros(0, np.uint16), *(c.datasets for c in self.chunks)]),
            offsets,
            tokens,
            sup,
            shards,
            np.concatenate([np.full(len(c.ids), c.shard, np.int32) for c in self.chunks])
            if shards is not None
            else None,
            np.concatenate([c.row_start for c in self.chunks]) if shards is not None else None,
        )
        self.chunks = []
        self.report.used = len(index)
        self.report.lengths = index.lengths
        return index


def load_sequences(
    path: str | Path,
    max_len: int,
    length_policy: str = "skip",
    truncated: str = "train",
    quarantined: set[str] | frozenset[str] = frozenset(),
) -> tuple[SequenceIndex, DataReport]:
    """Every excluded sample is counted by reason; none disappears silently.

    Which samples train is the store's one rule (`select_trainable`: aborted samples, repetition
    loops, quarantined samples, bad loss masks and, with `truncated="skip"`, cut outputs are
    excluded). Then `length_policy`: `skip` drops
    sequences longer than `max_len` (reason `over_max_len`); `truncate` keeps their first
    `max_len` tokens (counted in `truncated`).
    """
    table = load_table(path)
    keep, excluded = select_trainable(table, truncated, quarantined)
    report = DataReport(loaded=len(table), excluded=excluded)
    packer = _Packer(max_len, length_policy, report)
    for lo in range(0, len(keep), 4096):  # chunks: the policy runs on arrays, not per token
        chunk = keep[lo : lo + 4096]
        tokens, sup, lengths = [], [], []
        for i in chunk:
            prompt, output = table.prompt.row(i), table.output.row(i)
            tokens += [prompt, output]
            sup += [np.zeros(len(prompt), np.uint8), table.supervised(i).astype(np.uint8)]
            lengths.append(len(prompt) + len(output))
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        arrays = (
            np.concatenate(tokens) if tokens else np.zeros(0, np.int32),
            np.concatenate(sup) if sup else np.zeros(0, np.uint8),
        )
        packer.add(
            [table.ids[i] for i in chunk],
            [table.dataset[i] for i in chunk],
            offsets,
            lambda arrays=arrays: arrays,
        )
    return packer.finish(), report


def load_captured_sequences(
    capture_dir: str | Path, max_len: int, length_policy: str = "skip"
) -> tuple[SequenceIndex, DataReport, dict]:
    """Sequences of an `eyas capture` (which applied the store's training rule when it
    captured), with the same length policy as training from samples."""
    shards, manifest = read_capture_index_arrays(capture_dir)
    report = DataReport(loaded=sum(int((~s.duplicate).sum()) for s in shards))
    report.excluded.update(manifest.get("excluded") or {})
    packer = _Packer(max_len, length_policy, report)
    for k, shard in enumerate(shards):
        packer.add(
            shard.ids,
            shard.datasets,
            shard.offsets,
            lambda p=shard.path: read_shard_tokens(p),
            k,
            lambda ids, sup, p=shard.path: read_shard_tokens_into(p, ids, sup),
            shard.duplicate,
        )
        shard.ids = shard.datasets = np.zeros(
            0, "S1"
        )  # packed now; the strings need not stay resident
    return packer.finish([s.path for s in shards]), report, manifest


def group_by_budget(order: list[int], lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Split `order` into consecutive batches whose padded size (longest x count) stays within
    `max_tokens`; a sequence longer than the budget gets a batch of its own."""
    batches, cur, width = [], [], 0
    for i in order:
        n = lengths[i]
        if cur and max(width, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, width = [], 0
        cur.append(i)
        width = max(width, n)
    if cur:
        batches.append(cur)
    return batches


def check_token_ids(seqs: SequenceIndex, vocab_size: int, source) -> None:
    """Data from another tool can hold ids the target does not have; name the sample and the
    id instead of failing inside the embedding."""
    bad = np.flatnonzero((seqs.tokens < 0) | (seqs.tokens >= vocab_size))
    if len(bad):
        row = int(np.searchsorted(seqs.offsets, bad[0], side="right")) - 1
        raise EyasError(
            "token_out_of_vocab",
            f"sample {seqs.id(row)} in {source} holds token id {int(seqs.tokens[bad[0]])}, "
            f"outside the target's vocabulary of {vocab_size}: the data was made with another "
            "tokenizer",
        )
