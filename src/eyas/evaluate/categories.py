"""The category of an evaluated prompt (chat, code, tool_calls, math), from its dataset name.

Published drafters' model cards report acceptance per kind of task; eyas reads the kind from
the dataset a prompt came from (`dataset` in the rendered row, or the benchmark's name with
`--bench`), never from the prompt text:

- a benchmark eyas knows has its own category (`eyas.benchmarks.catalog`: MT-Bench chat,
  HumanEval code, every BFCL category tool_calls);
- any other dataset name is matched by the words in it, first match wins: `math`, `gsm`,
  `reasoning` -> math; `bfcl`, `tool`, `function`, `xlam`, `glaive`, `hermes` -> tool_calls;
  `code`, `coding`, `humaneval`, `mbpp` -> code; `chat`, `sharegpt`, `ultrachat`,
  `mt_bench` -> chat;
- a name with none of them is `other` (a category is never guessed from nothing).

A thinking-mode suffix (`name#thinking-on`) is ignored. Rename a dataset (`eyas convert
--dataset`) to place it in a category.
"""

from __future__ import annotations

import re

CATEGORIES = ("chat", "code", "tool_calls", "math", "other")

RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("math", ("math", "gsm", "reasoning")),
    ("tool_calls", ("bfcl", "tool", "function", "xlam", "glaive", "hermes")),
    ("code", ("code", "coding", "humaneval", "mbpp")),
    ("chat", ("chat", "sharegpt", "ultrachat", "mt_bench")),
)


def category_of(dataset: str) -> str:
    """chat, code, tool_calls, math or other (see the module docstring)."""
    name = dataset.split("#", 1)[0].lower()
    from eyas.benchmarks.catalog import BENCHMARKS

    bench = BENCHMARKS.get(name)
    if bench is not None:
        return bench.category
    words = set(re.split(r"[^a-z0-9]+", name)) | {name}
    for category, keys in RULES:
        if any(k in words or (len(k) > 4 and k in name) for k in keys):
            return category
    return "other"


def grouped(datasets) -> dict[str, list[str]]:
    """{category: its dataset names}, categories in CATEGORIES order, names sorted. The
    evaluators sum each category's raw counts (never a mean of the datasets' means)."""
    out: dict[str, list[str]] = {}
    for name in sorted(datasets):
        out.setdefault(category_of(name), []).append(name)
    return {c: out[c] for c in CATEGORIES if c in out}
