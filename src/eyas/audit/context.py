"""What the checks share: the sample table, the tokenizer and profile, and decoded views."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eyas.audit.data import SampleTable
from eyas.render.profiles import Profile

_KIMI_TURN = re.compile(
    r"(<\|im_system\|>|<\|im_user\|>|<\|im_assistant\|>)(.*?)<\|im_middle\|>(.*?)(?=<\|im_end\|>|$)",
    re.DOTALL,
)
KIMI_DEFAULT_SYSTEM = "You are Kimi, an AI assistant created by Moonshot AI."


@dataclass
class Finding:
    check: str
    severity: str  # error | warning | info
    dataset: str
    count: int
    total: int
    examples: list[str]
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {
            "check": self.check,
            "severity": self.severity,
            "dataset": self.dataset,
            "count": self.count,
            "total": self.total,
            "examples": self.examples,
            "message": self.message,
        }
        if self.data:
            out["data"] = self.data
        return out


@dataclass
class AuditOptions:
    max_len: int | None = None  # planned training/serving sequence length
    truncation_error_rate: float = 0.05
    decode_sample: int = 2000  # per dataset, for checks that decode or re-render
    num_examples: int = 5


@dataclass
class AuditContext:
    table: SampleTable
    profile: Profile
    options: AuditOptions
    tokenizer: Any = None
    renderer: Any = None
    probe: dict | None = None
    _prompt_text: dict[int, str] = field(default_factory=dict)
    _output_text: dict[int, str] = field(default_factory=dict)
    _turns: dict[int, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.vocab: dict[str, int] = self.tokenizer.get_vocab() if self.tokenizer else {}
        self.marker_ids = {m: self.vocab[m] for m in self.profile.markers if m in self.vocab}
        self.stop_ids: set[int] = set()
        if self.renderer is not None:
            self.stop_ids = set(self.renderer.stop_token_ids())
        elif self.tokenizer is not None:
            self.stop_ids = {self.vocab[t] for t in self.profile.stop_tokens if t in self.vocab}

    def finding(
        self,
        check: str,
        severity: str,
        dataset: str,
        hits: list[int],
        total: int,
        message: str,
        **data: Any,
    ) -> Finding:
        examples = [self.table.ids[i] for i in hits[: self.options.num_examples]]
        return Finding(check, severity, dataset, len(hits), total, examples, message, data)

    def sample_of(self, idx: np.ndarray, n: int | None = None, decode: bool = True) -> np.ndarray:
        """Deterministic, evenly spread subset for the expensive checks (decoded in batch)."""
        n = n or self.options.decode_sample
        if len(idx) > n:
            idx = idx[np.linspace(0, len(idx) - 1, n).astype(np.int64)]
        if decode:
            self.decode_many(idx)
        return idx

    def row_any(self, ragged, flags: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """For each row in `idx`: is any of its flat `flags` true? (vectorized)"""
        counts = np.add.reduceat(np.append(flags, False).astype(np.int64), ragged.offsets[:-1])
        counts[ragged.lengths == 0] = 0
        return counts[idx] > 0

    def all_supervised(self) -> bool:
        lm = self.table.loss_mask
        return len(lm.values) == 0

    def sampled_note(self, checked: np.ndarray, idx: np.ndarray) -> str:
        return (
            ""
            if len(checked) == len(idx)
            else f" (checked a sample of {len(checked)} of {len(idx)})"
        )

    def decode_many(self, idx: np.ndarray) -> None:
        """Decode prompts and outputs of `idx` in two batched (parallel, Rust) calls."""
        todo = [int(i) for i in idx if int(i) not in self._prompt_text]
        if not todo or self.tokenizer is None:
            return
        t = self.table
        prompts = self.tokenizer.batch_decode(
            [t.prompt.row(i).tolist() for i in todo], skip_special_tokens=False
        )
        outputs = self.tokenizer.batch_decode(
            [t.output.row(i).tolist() for i in todo], skip_special_tokens=False
        )
        self._prompt_text.update(zip(todo, prompts))
        self._output_text.update(zip(todo, outputs))

    def decode_batch(self, rows: list[list[int]]) -> list[str]:
        # The Rust tokenizer decodes a batch in parallel; transformers' batch_decode loops in
        # Python at ~0.5 ms per call, which dominated the audit's run time.
        fast = getattr(self.tokenizer, "backend_tokenizer", None)
        if fast is not None:
            return fast.decode_batch(rows, skip_special_tokens=False)
        return self.tokenizer.batch_decode(rows, skip_special_tokens=False)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        fast = getattr(self.tokenizer, "backend_tokenizer", None)
        if fast is not None:
            fast.encode_special_tokens = False  # transformers may leave it set (see Renderer)
            return [e.ids for e in fast.encode_batch(texts, add_special_tokens=False)]
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def prompt_text(self, i: int) -> str:
        if i not in self._prompt_text:
            self.decode_many(np.asarray([i]))
        return self._prompt_text[i]

    def output_text(self, i: int) -> str:
        if i not in self._output_text:
            self.decode_many(np.asarray([i]))
        return self._output_text[i]

    def turns(self, i: int) -> list[tuple[str, str]]:
        """(label, body) of each prompt turn. The markers are single special tokens, so they
        appear verbatim in the decoded prompt and the split is exact."""
        if i in self._turns:
            return self._turns[i]
        text = self.prompt_text(i)
        if self.profile.name.startswith("kimi"):
            turns = [(m.group(2), m.group(3)) for m in _KIMI_TURN.finditer(text)]
        elif self.profile.name == "qwen3":
            turns = []
            for chunk in text.split("<|im_start|>")[1:]:
                label, _, body = chunk.partition("\n")
                turns.append((label, body.split("<|im_end|>")[0]))
        else:
            turns = [("prompt", text)]
        self._turns[i] = turns
        return turns

    def default_system_body(self) -> str | None:
        if self.probe and self.probe.get("default_system_injected"):
            text = self.probe.get("default_system_text", "")
            return text.split("<|im_middle|>")[-1].split("<|im_end|>")[0] or None
        if self.profile.name.startswith("kimi"):
            return KIMI_DEFAULT_SYSTEM
        return None
