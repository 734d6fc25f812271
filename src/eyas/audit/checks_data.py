"""Checks of the data as a whole: duplicates across datasets, length distributions and their
anomalies, and how the samples were produced."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator

import numpy as np

from eyas.audit.check import Check, Hit, Systemic, register
from eyas.audit.context import AuditContext
from eyas.backends import registry


@register
class Duplicates(Check):
    """The same id twice breaks resume-by-id; the same prompt and output under two ids (in one
    dataset or across datasets) trains the sample twice. Later copies are flagged."""

    name = "duplicates"
    reasons = {
        "duplicate_id": "the same id appears more than once",
        "duplicate_sample": "identical prompt and output as an earlier sample under another id "
        "(in this or another dataset)",
    }

    def _first(self, ctx: AuditContext) -> tuple[dict[str, int], list[int]]:
        """Per id its first row, and per row the first row with identical content (global,
        computed once per audit)."""
        if "duplicates" in ctx.cache:
            return ctx.cache["duplicates"]
        t = ctx.table
        first_id: dict[str, int] = {}
        seen: dict[bytes, int] = {}
        first_content = []
        for i in range(len(t)):
            first_id.setdefault(t.ids[i], i)
            h = hashlib.blake2b(t.prompt.row(i).tobytes(), digest_size=16)
            h.update(b"|")
            h.update(t.output.row(i).tobytes())
            first_content.append(seen.setdefault(h.digest(), i))
        ctx.cache["duplicates"] = (first_id, first_content)
        return first_id, first_content

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        first_id, first_content = self._first(ctx)
        ids = ctx.table.ids
        for i in idx:
            i = int(i)
            if first_id[ids[i]] != i:
                yield Hit(i, "error", "duplicate_id")
            elif first_content[i] != i and ids[first_content[i]] != ids[i]:
                yield Hit(i, "error", "duplicate_sample")


def length_stats(lengths: np.ndarray) -> dict:
    if len(lengths) == 0:
        return {}
    p = np.percentile(lengths, [50, 90, 99])
    hist, edges = np.histogram(lengths, bins=20)
    return {
        "median": float(p[0]),
        "p90": float(p[1]),
        "p99": float(p[2]),
        "max": int(lengths.max()),
        "mean": round(float(lengths.mean()), 1),
        "share_under_500": round(float((lengths < 500).mean()), 4),
        "histogram": {"counts": hist.tolist(), "edges": [round(float(e), 1) for e in edges]},
    }


@register
class Length(Check):
    """Distributions (prompt and output tokens, finish reasons) for the report, and two
    anomalies worth a look: many outputs at the cap, and outputs far shorter than the source's
    own assistant turns (a backend that stops early, a wrong stop token, lost reasoning)."""

    name = "length"
    reasons = {
        "distribution": "length distributions",
        "many_at_cap": "a large share of outputs stops exactly at max_new_tokens",
        "much_shorter_than_source": "outputs are far shorter than the source's assistant turns",
    }
    cap_share = 0.2
    short_ratio = 0.25

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Systemic]:
        t = ctx.table
        prompt, output = t.prompt.lengths[idx], t.output.lengths[idx]
        finishes = Counter(str(t.finish_reason[int(i)]) for i in idx)
        caps = np.array([t.sampling(int(i)).get("max_new_tokens") or -1 for i in idx])
        at_cap = int(((output >= caps) & (caps > 0)).sum())
        ps, os_ = length_stats(prompt), length_stats(output)
        data = {"prompt": ps, "output": os_, "finish_reasons": dict(finishes), "at_cap": at_cap}
        source_chars, output_chars = [], []
        if ctx.tokenizer is not None:
            for i in ctx.sample_of(idx):
                src = ctx.source_turn(int(i))
                text = (src.get("content") or "") + (src.get("reasoning_content") or "")
                if isinstance(text, str) and text and src.get("role") == "assistant":
                    source_chars.append(len(text))
                    output_chars.append(len(ctx.output_text(int(i))))
        if source_chars:
            data["source_chars_median"] = float(np.median(source_chars))
            data["output_chars_median"] = float(np.median(output_chars))
        yield Systemic(
            "info",
            "distribution",
            f"prompt tokens median {ps.get('median', 0):.0f} p99 {ps.get('p99', 0):.0f}; "
            f"output tokens median {os_.get('median', 0):.0f} p90 {os_.get('p90', 0):.0f} "
            f"p99 {os_.get('p99', 0):.0f} max {os_.get('max', 0)}; "
            f"{os_.get('share_under_500', 0):.0%} of outputs under 500 tokens",
            len(idx),
            len(idx),
            data=data,
        )
        if len(idx) and at_cap / len(idx) > self.cap_share:
            yield Systemic(
                "warning",
                "many_at_cap",
                f"{at_cap / len(idx):.0%} of outputs stop exactly at max_new_tokens",
                at_cap,
                len(idx),
            )
        if source_chars and np.median(output_chars) < self.short_ratio * np.median(source_chars):
            yield Systemic(
                "warning",
                "much_shorter_than_source",
                f"median output {np.median(output_chars):.0f} characters vs "
                f"{np.median(source_chars):.0f} in the source's assistant turns",
                len(source_chars),
                len(source_chars),
            )


@register
class LossyBackend(Check):
    name = "lossy-backend"
    reasons = {
        "lossy_backend": "samples produced through a chat-completions text round trip: output "
        "ids were re-tokenized from text, not sampled"
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Systemic]:
        lossy_run = bool((ctx.table.manifest.get("backend") or {}).get("lossy"))
        lossy = {name: registry.lossy(name) for name in set(ctx.table.backend[int(i)] for i in idx)}
        hits = [int(i) for i in idx if lossy_run or lossy[ctx.table.backend[int(i)]]]
        if hits:
            yield Systemic(
                "error",
                "lossy_backend",
                self.reasons["lossy_backend"],
                len(hits),
                len(idx),
                [ctx.table.ids[i] for i in hits[: ctx.options.num_examples]],
            )
