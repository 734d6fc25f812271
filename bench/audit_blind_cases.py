"""Blind cases for `bench_audit_recall.py`: broken samples written from a description of how
data goes wrong in practice (docs/bug-classes.md, the peers' bug reports), at the text level
where the bug happens, WITHOUT naming the check or reason that should catch them.

`eyas.testing.planted` writes each bug next to the check it must trip, so its recall is a
regression suite: it shows the checks still catch what they were built for. These cases ask the
other question: does the audit notice a broken sample it was not written against? A case counts
as caught when the audit flags its id at all (error or warning, any check); the bench reports
which checks did, and every miss.

Each builder takes the clean world (`eyas.testing.planted.World`: the Kimi-format toy renderer,
its conversations and their clean samples) and a variant, and returns one broken sample.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from eyas.records import Sample
from eyas.testing.planted import World


@dataclass(frozen=True)
class BlindCase:
    name: str
    what: str  # the bug, as a user would report it
    build: Callable[[World, int], Sample]


def _sample(w: World, v: int, pred: Callable[[Sample], bool] = lambda s: True) -> Sample:
    pool = [s for s in w.clean if pred(s)]
    s = copy.deepcopy(pool[(7 * v + 3) % len(pool)])  # not the planted corpus's picks
    return s


def _text(w: World, ids: list[int]) -> str:
    return w.renderer.tokenizer.decode(ids, skip_special_tokens=False)


def _named(s: Sample, tag: str, v: int) -> Sample:
    s.id = f"blind-{tag}-{v}-{s.id}"  # ends with the clean sample's id (`source_id`)
    return s


def source_id(case_id: str) -> str:
    """The clean sample a case was made from (left out of its audit: not a duplicate)."""
    return case_id.split("-", 3)[3]


def chatml_prompt(w: World, v: int) -> Sample:
    """The conversation rendered with another model's (ChatML) template by hand."""
    s = _sample(w, v)
    turns = "".join(
        f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n"
        for m in s.messages[: s.turn]
    )
    s.prompt_ids = w.renderer.encode(turns + "<|im_start|>assistant\n")
    return _named(s, "chatml", v)


def prompt_sent_twice(w: World, v: int) -> Sample:
    """A client that prepends the rendered history to a prompt that already holds it."""
    s = _sample(w, v)
    s.prompt_ids = [*s.prompt_ids, *s.prompt_ids]
    return _named(s, "twice", v)


def history_trimmed_from_the_left(w: World, v: int) -> Sample:
    """Context trimming that cuts the oldest tokens off the rendered prompt."""
    s = _sample(w, v, lambda s: len(s.prompt_ids) > 40)
    s.prompt_ids = s.prompt_ids[len(s.prompt_ids) // 3 :]
    return _named(s, "lefttrim", v)


def stripped_and_retokenized(w: World, v: int) -> Sample:
    """The response text post-processed (stripped, end token removed) and tokenized again."""
    s = _sample(w, v, lambda s: len(s.output_ids) > 4)
    text = _text(w, s.output_ids).replace("<|im_end|>", "").strip()
    s.output_ids = w.renderer.encode(text)
    return _named(s, "strip", v)


def runs_into_the_next_turn(w: World, v: int) -> Sample:
    """A server that ignored the stop token: the output goes on to write the user's turn."""
    s = _sample(w, v)
    more = "<|im_user|>user<|im_middle|>Thanks, and one more thing?<|im_end|>"
    s.output_ids = [*s.output_ids, *w.renderer.encode(more)]
    return _named(s, "nextturn", v)


def answer_of_another_row(w: World, v: int) -> Sample:
    """Outputs joined back to prompts by position after a reorder: another row's answer."""
    s = _sample(w, v)
    other = next(
        x
        for x in w.clean[(5 * v + 1) % len(w.clean) :] + w.clean
        if x.output_ids != s.output_ids and x.dataset != s.dataset
    )
    s.output_ids = list(other.output_ids)
    return _named(s, "swapped", v)


def call_as_plain_json(w: World, v: int) -> Sample:
    """A tool call written as JSON text in the reply instead of the model's call section."""

    def tooled(s: Sample) -> bool:
        return bool(s.tools)

    s = _sample(w, v, tooled)
    name = s.tools[0]["function"]["name"]
    text = _text(w, s.output_ids)
    head = text[: text.index("</think>") + len("</think>")] if "</think>" in text else ""
    s.output_ids = w.renderer.encode(f'{head}{{"name": "{name}", "arguments": {{}}}}<|im_end|>')
    return _named(s, "jsoncall", v)


def length_cut_recorded_as_stop(w: World, v: int) -> Sample:
    """A response cut by the server's token budget and written down as finished."""
    s = _sample(w, v, lambda s: len(s.output_ids) > 8)
    keep = len(s.output_ids) // 2
    s.output_ids = s.output_ids[:keep]
    s.sampling = {**s.sampling, "max_new_tokens": keep}
    return _named(s, "halfcut", v)


def empty_after_reasoning(w: World, v: int) -> Sample:
    """The model thought, then stopped without answering."""

    def thinks(s: Sample) -> bool:
        return "</think>" in _text(w, s.output_ids)

    s = _sample(w, v, thinks)
    close = w.renderer.tokenizer.convert_tokens_to_ids("</think>")
    s.output_ids = [*s.output_ids[: s.output_ids.index(close) + 1], s.output_ids[-1]]
    return _named(s, "thinkonly", v)


def untrained_everything_masked(w: World, v: int) -> Sample:
    """A loss mask of zeros: the sample trains nothing (a masking rule gone wrong)."""
    s = _sample(w, v)
    s.loss_mask = [0] * len(s.output_ids)
    return _named(s, "zeromask", v)


BLIND_CASES = [
    BlindCase("chatml_prompt", "the prompt rendered with another model's template", chatml_prompt),
    BlindCase("prompt_sent_twice", "the rendered history prepended twice", prompt_sent_twice),
    BlindCase(
        "history_trimmed_from_the_left",
        "the oldest third of the prompt cut away",
        history_trimmed_from_the_left,
    ),
    BlindCase(
        "stripped_and_retokenized",
        "the reply stripped of whitespace and its end token, then re-tokenized",
        stripped_and_retokenized,
    ),
    BlindCase(
        "runs_into_the_next_turn",
        "the output continues past its turn into a made-up user turn",
        runs_into_the_next_turn,
    ),
    BlindCase(
        "answer_of_another_row",
        "outputs joined to the wrong prompts (another dataset's answer)",
        answer_of_another_row,
    ),
    BlindCase(
        "call_as_plain_json",
        "a tool call written as JSON text, not in the call section",
        call_as_plain_json,
    ),
    BlindCase(
        "length_cut_recorded_as_stop",
        "cut at half its length by the token budget, recorded as finished",
        length_cut_recorded_as_stop,
    ),
    BlindCase(
        "empty_after_reasoning",
        "reasoning, then no answer at all",
        empty_after_reasoning,
    ),
    BlindCase(
        "untrained_everything_masked",
        "a loss mask of zeros over the whole output",
        untrained_everything_masked,
    ),
]
