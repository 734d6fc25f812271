"""What the checks share: the sample table, the model format, the tokenizer and renderer when
given, and cached views (decoded text, prompt turns, vectorized per-row token counts)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eyas.audit.config import AuditOptions  # the options and their defaults live in the schema
from eyas.formats import ModelFormat, Turn
from eyas.store import Ragged, SampleTable

__all__ = ["AuditContext", "AuditOptions"]


@dataclass
class AuditContext:
    table: SampleTable
    model_format: ModelFormat
    options: AuditOptions
    tokenizer: Any = None
    renderer: Any = None
    probe: dict | None = None
    stop_ids: set[int] = field(default_factory=set)
    cache: dict[str, Any] = field(default_factory=dict)  # per-audit results checks share
    _prompt_text: dict[int, str] = field(default_factory=dict)
    _output_text: dict[int, str] = field(default_factory=dict)
    _turns: dict[int, list[Turn]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        fmt = self.model_format
        self.marker_ids: dict[str, int] = (
            fmt.marker_ids(self.tokenizer) if self.tokenizer is not None else {}
        )
        if self.tokenizer is not None and not self.stop_ids:
            self.stop_ids = set(fmt.stop_token_ids(self.tokenizer))

    def available(self, need: str) -> bool:
        return {
            "tokenizer": self.tokenizer is not None,
            "renderer": self.renderer is not None,
            "stop_ids": bool(self.stop_ids),
        }[need]

    # -- samples --------------------------------------------------------------------------

    def sample_of(self, idx: np.ndarray) -> np.ndarray:
        """Deterministic, evenly spread subset for the checks that decode (decoded in batch)."""
        n = self.options.decode_limit
        if n and len(idx) > n:
            idx = idx[np.linspace(0, len(idx) - 1, n).astype(np.int64)]
        self.decode_many(idx)
        return idx

    # -- vectorized token views -----------------------------------------------------------

    def row_counts(self, ragged: Ragged, flags: np.ndarray) -> np.ndarray:
        """Per row of the whole table: how many of its flat `flags` are true."""
        if len(flags) == 0:
            return np.zeros(len(ragged.offsets) - 1, dtype=np.int64)
        counts = np.add.reduceat(np.append(flags, False).astype(np.int64), ragged.offsets[:-1])
        counts[ragged.lengths == 0] = 0
        return counts

    def count_ids(self, ragged: Ragged, ids: set[int] | list[int]) -> np.ndarray:
        ids = np.fromiter(ids, dtype=np.int64) if ids else np.zeros(0, np.int64)
        return self.row_counts(ragged, np.isin(ragged.values, ids))

    def last_tokens(self, ragged: Ragged) -> np.ndarray:
        """Last id of each row, -1 for empty rows."""
        lengths = ragged.lengths
        safe = np.maximum(ragged.offsets[1:] - 1, 0)
        values = ragged.values[np.minimum(safe, max(len(ragged.values) - 1, 0))]
        return np.where(lengths > 0, values, -1) if len(ragged.values) else -np.ones_like(lengths)

    # -- decoded views --------------------------------------------------------------------

    def decode_many(self, idx: np.ndarray) -> None:
        """Decode prompts and outputs of `idx` in two batched (parallel, Rust) calls."""
        todo = [int(i) for i in idx if int(i) not in self._prompt_text]
        if not todo or self.tokenizer is None:
            return
        t = self.table
        self._prompt_text.update(
            zip(todo, self._batch_decode([t.prompt.row(i).tolist() for i in todo]))
        )
        self._output_text.update(
            zip(todo, self._batch_decode([t.output.row(i).tolist() for i in todo]))
        )

    def _batch_decode(self, rows: list[list[int]]) -> list[str]:
        # The Rust tokenizer decodes a batch in parallel; transformers' batch_decode loops in
        # Python at ~0.5 ms per call, which dominated the audit's run time.
        fast = getattr(self.tokenizer, "backend_tokenizer", None)
        if fast is not None:
            return fast.decode_batch(rows, skip_special_tokens=False)
        return self.tokenizer.batch_decode(rows, skip_special_tokens=False)

    def encode(self, text: str) -> list[int]:
        fast = getattr(self.tokenizer, "backend_tokenizer", None)
        if fast is not None:
            fast.encode_special_tokens = False  # transformers may leave it set (see Renderer)
            return fast.encode(text, add_special_tokens=False).ids
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_text(self, i: int) -> str:
        if i not in self._prompt_text:
            self.decode_many(np.asarray([i]))
        return self._prompt_text[i]

    def output_text(self, i: int) -> str:
        if i not in self._output_text:
            self.decode_many(np.asarray([i]))
        return self._output_text[i]

    def turns(self, i: int) -> list[Turn]:
        """The prompt's turns. Markers are single special tokens, so they appear verbatim in
        the decoded prompt and the split is exact."""
        if i not in self._turns:
            self._turns[i] = self.model_format.split_turns(self.prompt_text(i))
        return self._turns[i]

    def source_turn(self, i: int) -> dict:
        """The source message this sample regenerated ({} when unknown)."""
        msgs, turn = self.table.messages(i), int(self.table.turn[i])
        return msgs[turn] if 0 <= turn < len(msgs) else {}

    def history(self, i: int) -> list[dict]:
        msgs, turn = self.table.messages(i), int(self.table.turn[i])
        return msgs[:turn] if turn >= 0 else msgs

    def default_system_body(self) -> str | None:
        if self.probe is not None:
            return self.probe.get("default_system_text") or None
        return self.model_format.known_default_system
