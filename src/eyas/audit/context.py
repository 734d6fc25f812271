"""What the checks share: the sample table, the tokenizer and profile, and decoded views."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eyas.audit.data import SampleTable
from eyas.render.profiles import Profile

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

    def sample_of(self, idx: np.ndarray) -> np.ndarray:
        """Deterministic, evenly spread subset for the expensive checks."""
        n = self.options.decode_sample
        if len(idx) <= n:
            return idx
        return idx[np.linspace(0, len(idx) - 1, n).astype(np.int64)]

    def sampled_note(self, checked: np.ndarray, idx: np.ndarray) -> str:
        return (
            ""
            if len(checked) == len(idx)
            else f" (checked a sample of {len(checked)} of {len(idx)})"
        )

    def prompt_text(self, i: int) -> str:
        if i not in self._prompt_text:
            self._prompt_text[i] = self.tokenizer.decode(
                self.table.prompt.row(i).tolist(), skip_special_tokens=False
            )
        return self._prompt_text[i]

    def output_text(self, i: int) -> str:
        if i not in self._output_text:
            self._output_text[i] = self.tokenizer.decode(
                self.table.output.row(i).tolist(), skip_special_tokens=False
            )
        return self._output_text[i]

    def turns(self, i: int) -> list[tuple[str, str]]:
        """(label, body) of each prompt turn, split at the profile's marker tokens."""
        if self.profile.name.startswith("kimi") and "<|im_middle|>" in self.marker_ids:
            return self._kimi_turns(self.table.prompt.row(i).tolist())
        text = self.prompt_text(i)
        if self.profile.name == "qwen3":
            turns = []
            for chunk in text.split("<|im_start|>")[1:]:
                label, _, body = chunk.partition("\n")
                turns.append((label, body.split("<|im_end|>")[0]))
            return turns
        return [("prompt", text)]

    def _kimi_turns(self, ids: list[int]) -> list[tuple[str, str]]:
        starts = {
            self.marker_ids.get(m) for m in ("<|im_system|>", "<|im_user|>", "<|im_assistant|>")
        }
        middle, end = self.marker_ids["<|im_middle|>"], self.marker_ids.get("<|im_end|>")
        turns, k = [], 0
        while k < len(ids):
            if ids[k] not in starts:
                k += 1
                continue
            try:
                m = ids.index(middle, k)
            except ValueError:
                break
            e = ids.index(end, m) if end in ids[m:] else len(ids)
            label = self.tokenizer.decode(ids[k + 1 : m], skip_special_tokens=False)
            body = self.tokenizer.decode(ids[m + 1 : e], skip_special_tokens=False)
            turns.append((label, body))
            k = e + 1
        return turns

    def default_system_body(self) -> str | None:
        if self.probe and self.probe.get("default_system_injected"):
            text = self.probe.get("default_system_text", "")
            return text.split("<|im_middle|>")[-1].split("<|im_end|>")[0] or None
        if self.profile.name.startswith("kimi"):
            return KIMI_DEFAULT_SYSTEM
        return None
