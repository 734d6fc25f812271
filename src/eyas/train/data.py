"""Training sequences from samples: `prompt_ids + output_ids`, token for token, with a mask.

Nothing is re-tokenized or re-rendered here (bug class #30): the sequence is exactly what was
sent and sampled. `supervised[k] = 1` iff token k is a generated token the drafter must learn
(every output token, or the sample's `loss_mask`); prompt tokens are never supervised.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from eyas.errors import EyasError
from eyas.store import load_table, select_trainable
from eyas.store.captures import CapturedRow, read_capture_index


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
    lengths: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        lengths = sorted(self.lengths)
        p99 = lengths[min(len(lengths) - 1, int(0.99 * len(lengths)))] if lengths else 0
        return {
            "loaded": self.loaded,
            "used": self.used,
            "excluded": dict(self.excluded),
            "truncated": self.truncated,
            "max_len_seen": max(lengths, default=0),
            "p99_len": p99,
        }


def load_sequences(
    path: str | Path,
    max_len: int,
    length_policy: str = "skip",
    truncated: str = "train",
    quarantined: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[Sequence], DataReport]:
    """Every excluded sample is counted by reason; none disappears silently.

    Which samples train is the store's one rule (`select_trainable`: aborted samples, repetition
    loops, quarantined samples, bad loss masks and, with `truncated="skip"`, cut outputs are
    excluded). Then `length_policy`: `skip` drops
    sequences longer than `max_len` (reason `over_max_len`); `truncate` keeps their first
    `max_len` tokens (counted in `truncated`).
    """
    if length_policy not in ("skip", "truncate"):
        raise ValueError("length_policy is 'skip' or 'truncate'")
    table = load_table(path)
    keep, excluded = select_trainable(table, truncated, quarantined)
    report = DataReport(loaded=len(table), excluded=excluded)
    out = []
    for i in keep:
        prompt, output = table.prompt.row(i).tolist(), table.output.row(i).tolist()
        ids = prompt + output
        sup = [0] * len(prompt) + table.supervised(i).astype(int).tolist()
        if len(ids) > max_len:
            if length_policy == "skip":
                report.excluded["over_max_len"] += 1
                continue
            ids, sup = ids[:max_len], sup[:max_len]
            report.truncated += 1
        report.lengths.append(len(ids))
        out.append(Sequence(table.ids[i], table.dataset[i], ids, sup))
    report.used = len(out)
    return out, report


def load_captured_sequences(
    capture_dir: str | Path, max_len: int, length_policy: str = "skip"
) -> tuple[list[Sequence], DataReport, dict]:
    """Sequences of an `eyas capture` (which applied the store's training rule when it
    captured), with the same length policy as training from samples."""
    rows, manifest = read_capture_index(capture_dir)
    report = DataReport(loaded=len(rows))
    report.excluded.update(manifest.get("excluded") or {})
    out = []
    for row in rows:
        ids, sup = row.input_ids, row.loss_mask
        if len(ids) > max_len:
            if length_policy == "skip":
                report.excluded["over_max_len"] += 1
                continue
            ids, sup = ids[:max_len], sup[:max_len]
            report.truncated += 1
        report.lengths.append(len(ids))
        out.append(Sequence(row.id, row.dataset, ids, sup, row))
    report.used = len(out)
    return out, report, manifest


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


def make_batches(seqs: list[Sequence], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Length-bucketed batches of at most `max_tokens` padded tokens, in a seeded order."""
    rng = random.Random(f"{seed}:{epoch}")
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i].ids), rng.random()))
    batches = group_by_budget(order, [len(s.ids) for s in seqs], max_tokens)
    rng.shuffle(batches)
    return batches


def check_token_ids(seqs: list[Sequence], vocab_size: int, source) -> None:
    """Data from another tool can hold ids the target does not have; name the sample and the
    id instead of failing inside the embedding."""
    for s in seqs:
        bad = next((t for t in s.ids if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise EyasError(
                "token_out_of_vocab",
                f"sample {s.id} in {source} holds token id {bad}, outside the target's "
                f"vocabulary of {vocab_size}: the data was made with another tokenizer",
            )
