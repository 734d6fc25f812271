"""Training sequences from samples: `prompt_ids + output_ids`, token for token, with a mask.

Nothing is re-tokenized or re-rendered here (bug class #30): the sequence is exactly what was
sent and sampled. `supervised[k] = 1` iff token k is a generated token the drafter must learn
(every output token, or the sample's `loss_mask`); prompt tokens are never supervised.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eyas.errors import EyasError
from eyas.store import load_table, select_trainable
from eyas.store.captures import CapturedRow, read_capture_arrays


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
        sample_ids: list[str],
        datasets: list[str],
        offsets: np.ndarray,
        tokens: np.ndarray,
        supervised: np.ndarray,
        shards: list[Path] | None = None,
        shard_of: np.ndarray | None = None,
        row_start: np.ndarray | None = None,
    ):
        # ids as one bytes array (fixed width), datasets as codes into a short name list
        self._ids = np.array([s.encode() for s in sample_ids], dtype=bytes)
        self.dataset_names = sorted(set(datasets))
        code = {name: k for k, name in enumerate(self.dataset_names)}
        self._dataset = np.array([code[d] for d in datasets], dtype=np.uint16)
        self.offsets = offsets.astype(np.int64, copy=False)
        self.lengths = np.diff(self.offsets).astype(np.int32)
        self.tokens = tokens.astype(np.int32, copy=False)
        self.supervised = supervised.astype(np.uint8, copy=False)
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


class _Packer:
    """Collects sequences chunk by chunk (a shard, or a run of samples) applying the length
    policy to whole arrays, then concatenates once."""

    def __init__(self, max_len: int, length_policy: str, report: DataReport):
        if length_policy not in ("skip", "truncate"):
            raise ValueError("length_policy is 'skip' or 'truncate'")
        self.max_len, self.policy, self.report = max_len, length_policy, report
        self.ids: list[str] = []
        self.datasets: list[str] = []
        self.lengths: list[np.ndarray] = []
        self.tokens: list[np.ndarray] = []
        self.sup: list[np.ndarray] = []
        self.shard_of: list[np.ndarray] = []
        self.row_start: list[np.ndarray] = []

    def add(
        self,
        ids: list[str],
        datasets: list[str],
        offsets: np.ndarray,
        tokens: np.ndarray,
        sup: np.ndarray,
        shard: int | None = None,
    ) -> None:
        lengths = np.diff(offsets)
        keep = np.ones(len(lengths), dtype=bool)
        over = lengths > self.max_len
        if self.policy == "skip":
            keep &= ~over
            self.report.excluded["over_max_len"] += int(over.sum())
        else:
            self.report.truncated += int(over.sum())
        new_len = np.minimum(lengths, self.max_len)[keep]
        if keep.all() and not over.any():
            tok, msk = tokens, sup
        else:  # keep each kept sequence's first new_len tokens
            pos = np.arange(len(tokens)) - np.repeat(offsets[:-1], lengths)
            limit = np.repeat(np.where(keep, np.minimum(lengths, self.max_len), 0), lengths)
            take = pos < limit
            tok, msk = tokens[take], sup[take]
        kept = np.flatnonzero(keep)
        self.ids += [ids[k] for k in kept]
        self.datasets += [datasets[k] for k in kept]
        self.lengths.append(new_len.astype(np.int64))
        self.tokens.append(np.asarray(tok, dtype=np.int32))
        self.sup.append(np.asarray(msk, dtype=np.uint8))
        if shard is not None:
            self.shard_of.append(np.full(len(kept), shard, dtype=np.int32))
            self.row_start.append(offsets[:-1][kept].astype(np.int64))

    def finish(self, shards: list[Path] | None = None) -> SequenceIndex:
        def cat(parts: list[np.ndarray], dtype) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

        lengths = cat(self.lengths, np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        index = SequenceIndex(
            self.ids,
            self.datasets,
            offsets,
            cat(self.tokens, np.int32),
            cat(self.sup, np.uint8),
            shards,
            cat(self.shard_of, np.int32) if shards is not None else None,
            cat(self.row_start, np.int64) if shards is not None else None,
        )
        self.report.used = len(index)
        self.report.lengths = index.lengths
        return index


def load_sequences(
    path: str | Path,
    max_len: int,
    length_policy: str = "skip",
    include_truncated: bool = False,
    quarantined: set[str] | frozenset[str] = frozenset(),
) -> tuple[SequenceIndex, DataReport]:
    """Every excluded sample is counted by reason; none disappears silently.

    Which samples train is the store's one rule (`select_trainable`: aborted, truncated or
    quarantined samples and bad loss masks are excluded). Then `length_policy`: `skip` drops
    sequences longer than `max_len` (reason `over_max_len`); `truncate` keeps their first
    `max_len` tokens (counted in `truncated`).
    """
    table = load_table(path)
    keep, excluded = select_trainable(table, include_truncated, quarantined)
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
        packer.add(
            [table.ids[i] for i in chunk],
            [table.dataset[i] for i in chunk],
            offsets,
            np.concatenate(tokens) if tokens else np.zeros(0, np.int32),
            np.concatenate(sup) if sup else np.zeros(0, np.uint8),
        )
    return packer.finish(), report


def load_captured_sequences(
    capture_dir: str | Path, max_len: int, length_policy: str = "skip"
) -> tuple[SequenceIndex, DataReport, dict]:
    """Sequences of an `eyas capture` (which applied the store's training rule when it
    captured), with the same length policy as training from samples."""
    shards, manifest = read_capture_arrays(capture_dir)
    report = DataReport(loaded=sum(len(s.ids) for s in shards))
    report.excluded.update(manifest.get("excluded") or {})
    packer = _Packer(max_len, length_policy, report)
    for k, shard in enumerate(shards):
        packer.add(shard.ids, shard.datasets, shard.offsets, shard.input_ids, shard.loss_mask, k)
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
