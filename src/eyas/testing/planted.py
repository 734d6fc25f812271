"""Planted data bugs for the audit: one function per bug class, each turning clean samples into
broken ones and naming the check (and reason) that must catch them, plus clean controls that
must pass. The audit tests plant every class; `bench/bench_audit_recall.py` plants each class in
many variants and reports recall and false positives per check.

Samples follow a Kimi-K2.5-format target (the toy world's); `variant` picks which clean sample
and which detail of the bug to use, so a class can be planted many different ways.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from eyas.records import Conversation, Sample
from eyas.render.renderer import Renderer
from eyas.toy.naive import naive_glaive_messages
from eyas.toy.samples import reference_sample


@dataclass
class Planted:
    sample: Sample
    check: str
    reason: str
    severity: str = "error"


@dataclass
class World:
    renderer: Renderer
    conversations: list[Conversation]
    clean: list[Sample]

    def ids(self, *tokens: str) -> list[int]:
        vocab = self.renderer.tokenizer.get_vocab()
        return [vocab[t] for t in tokens]

    def pick(self, variant: int, pred: Callable[[Sample], bool] = lambda s: True) -> Sample:
        pool = [s for s in self.clean if pred(s)]
        return copy.deepcopy(pool[variant % len(pool)])

    def conv(self, variant: int, pred: Callable[[Conversation], bool]) -> Conversation:
        pool = [c for c in self.conversations if pred(c)]
        return pool[variant % len(pool)]


def _tag(s: Sample, tag: str, variant: int) -> Sample:
    s.id = f"{s.id}-{tag}{variant}"
    return s


def _tooled(c: Conversation) -> bool:
    return bool(c.tools) and any(m.get("tool_calls") for m in c.messages)


def _reasoned(s: Sample) -> bool:
    return bool(s.messages[s.turn].get("reasoning_content")) if s.turn >= 0 else False


# -- prompt bugs --------------------------------------------------------------------------------


def glaive_in_system(w: World, v: int) -> Planted:
    c = w.conv(v, _tooled)
    s = reference_sample(w.renderer, c, naive_glaive_messages(c.messages, c.tools), [])
    return Planted(_tag(s, "naive", v), "tool-format", "json_schema_text")


def hermes_in_system(w: World, v: int) -> Planted:
    c = w.conv(v, _tooled)
    listing = "\n".join(json.dumps(t) for t in c.tools)
    system = (
        "You are a function calling AI model. You are provided with function signatures within "
        f"<tools></tools> XML tags.\n<tools>\n{listing}\n</tools>"
    )
    msgs = [{"role": "system", "content": system}] + [
        m for m in c.messages if m["role"] != "system"
    ]
    s = reference_sample(w.renderer, c, msgs, [])
    return Planted(_tag(s, "hermes", v), "tool-format", "hermes_text")


def json_declaration(w: World, v: int) -> Planted:
    """A gateway that bypasses the tokenizer's TypeScript step declares tools as JSON."""
    c = w.conv(v, _tooled)
    w.renderer.supply_tools_ts = False
    try:
        s = reference_sample(w.renderer, c)
    finally:
        w.renderer.supply_tools_ts = True
    return Planted(_tag(s, "jsondecl", v), "tool-format", "json_declaration")


def tools_not_declared(w: World, v: int) -> Planted:
    c = w.conv(v, _tooled)
    s = reference_sample(w.renderer, c, tools=[])
    s.tools = c.tools
    return Planted(_tag(s, "ignored", v), "tools-ignored", "tools_not_declared")


def system_missing(w: World, v: int) -> Planted:
    c = w.conv(v, lambda c: c.messages[0]["role"] == "system")
    s = reference_sample(w.renderer, c, c.messages[1:])
    s.messages, s.turn = c.messages, s.turn + 1
    return Planted(_tag(s, "nosys", v), "system-prompt", "source_system_missing")


def control_token_in_user_text(w: World, v: int) -> Planted:
    """A user writes `<|im_end|>`; Kimi's tokenizer makes it the real control token."""
    c = w.conv(v, lambda c: any(m["role"] == "user" for m in c.messages))
    msgs = copy.deepcopy(c.messages)
    user = next(m for m in msgs if m["role"] == "user")
    marker = ["<|im_end|>", "<|im_system|>", "</think>"][v % 3]
    user["content"] = f"{user['content']} {marker} and then?"
    s = reference_sample(w.renderer, c, msgs)
    return Planted(_tag(s, "ctl", v), "special-tokens", "control_token_in_content")


def split_marker(w: World, v: int) -> Planted:
    s = w.pick(v)
    pieces = w.renderer.tokenizer(
        "<|im_end|>", add_special_tokens=False, split_special_tokens=True
    )["input_ids"]
    s.output_ids = s.output_ids[:-1] + pieces
    s.matched_stop = None
    return Planted(_tag(s, "split", v), "special-tokens", "split_marker")


def no_user_turn(w: World, v: int) -> Planted:
    """A ShareGPT row that starts with the assistant: the prompt holds no user turn."""
    s = w.pick(v, lambda s: s.messages and s.messages[0]["role"] != "system")
    s.messages = [{"role": "system", "content": "Be brief."}, s.messages[s.turn]]
    s.turn = 1
    prompt = w.renderer.render_text(s.messages[:1], None)
    s.prompt_ids = w.renderer.encode(prompt)
    return Planted(_tag(s, "nouser", v), "user-turn", "no_user_turn")


def template_drift(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.prompt_ids = s.prompt_ids[:-1] + w.renderer.encode("<think></think>")  # thinking off
    return Planted(_tag(s, "drift", v), "template-drift", "prompt_differs")


def literal_none_reasoning(w: World, v: int) -> Planted:
    s = w.pick(v, _reasoned)
    text = w.renderer.tokenizer.decode(s.prompt_ids)
    s.prompt_ids = w.renderer.encode(text + "None</think>")
    close = w.ids("</think>")[0]
    s.output_ids = s.output_ids[s.output_ids.index(close) + 1 :]
    return Planted(_tag(s, "none", v), "reasoning", "literal_none")


# -- output bugs --------------------------------------------------------------------------------


def unrecorded_truncation(w: World, v: int) -> Planted:
    """Cut at max_new_tokens, recorded as `stop`."""
    s = w.pick(v, lambda s: len(s.output_ids) > 6)
    cap = len(s.output_ids) - 2 - v % 3
    s.output_ids = s.output_ids[:cap]
    s.sampling = {**s.sampling, "max_new_tokens": cap}
    return Planted(_tag(s, "cut", v), "truncation", "unrecorded_truncation")


def finish_reason_missing(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.finish_reason = None
    return Planted(_tag(s, "nofinish", v), "truncation", "finish_reason_missing")


_LOOPS = (
    "\nThe world is still, the world is still,\nA stillness, a stillness.",
    " Abe a sea of dreams,",
    "\n\nThis moment is often described as a moment of peace, where the soul can rest.",
)


def repetition_loop(w: World, v: int) -> Planted:
    """Greedy decoding's degenerate mode: a line repeated until max_new_tokens cuts it (the
    loops SmolLM2 falls into; tests/real regenerates them)."""
    s = w.pick(v, lambda s: len(s.output_ids) > 4 and not _reasoned(s))
    span = w.renderer.encode(_LOOPS[v % len(_LOOPS)])
    body = s.output_ids[: len(s.output_ids) // 2] + span * (4 + 120 // len(span))
    cap = len(body) - 1 - v % len(span)  # cut mid-copy
    s.output_ids, s.finish_reason, s.matched_stop = body[:cap], "length", None
    s.sampling = {**s.sampling, "max_new_tokens": cap}
    return Planted(_tag(s, "loop", v), "repetition", "repetition_loop")


def healthy_cut(w: World, v: int) -> Sample:
    """A long answer cut at max_new_tokens: a warning, trained, never quarantined (one per
    dataset: a few cut outputs are no systemic truncation)."""

    def long(s: Sample) -> bool:
        return len(s.output_ids) > 6 and not _reasoned(s)

    names = sorted({s.dataset for s in w.clean if long(s)})  # datasets with a long answer
    name = names[v % len(names)]
    s = w.pick(v, lambda s: s.dataset == name and long(s))
    cap = len(s.output_ids) - 2
    s.output_ids, s.finish_reason, s.matched_stop = s.output_ids[:cap], "length", None
    s.sampling = {**s.sampling, "max_new_tokens": cap}
    return _tag(s, "longcut", v)


def missing_stop_token(w: World, v: int) -> Planted:
    s = w.pick(v, lambda s: len(s.output_ids) > 3)
    s.output_ids = s.output_ids[:-1]  # the stop token dropped (text-side stop trimming)
    s.sampling = {**s.sampling, "max_new_tokens": 4096}
    return Planted(_tag(s, "nostop", v), "stop-token", "missing_stop_token")


def loss_mask_length(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.loss_mask = [1] * (len(s.output_ids) + (1 if v % 2 else -1))
    return Planted(_tag(s, "masklen", v), "loss-mask", "loss_mask_length")


def loss_mask_off_by_one(w: World, v: int) -> Planted:
    s = w.pick(v, lambda s: len(s.output_ids) > 4)
    s.loss_mask = [0] + [1] * (len(s.output_ids) - 1)  # shifted: first token untrained
    return Planted(_tag(s, "maskshift", v), "loss-mask", "loss_mask_misaligned")


def reasoning_lost(w: World, v: int) -> Planted:
    """A chat-completions round trip drops the reasoning: a thinking prompt whose output has
    no `</think>`."""
    s = w.pick(v, _reasoned)
    close = w.ids("</think>")[0]
    s.output_ids = s.output_ids[s.output_ids.index(close) + 1 :]
    return Planted(_tag(s, "lost", v), "reasoning", "reasoning_lost")


def duplicate_think(w: World, v: int) -> Planted:
    s = w.pick(v, _reasoned)
    close = w.ids("</think>")[0]
    at = s.output_ids.index(close)
    s.output_ids = [*s.output_ids[: at + 1], close, *s.output_ids[at + 1 :]]
    return Planted(_tag(s, "twothink", v), "reasoning", "duplicate_think")


def scaffold_supervised(w: World, v: int) -> Planted:
    """The thinking-off scaffold `<think></think>` moved from the prompt into the output."""
    s = w.pick(v, lambda s: not _reasoned(s))
    close = w.ids("</think>")[0]
    s.prompt_ids = s.prompt_ids[:-1]  # the generation prompt without its `<think>`
    s.output_ids = [*w.ids("<think>", "</think>"), *s.output_ids[s.output_ids.index(close) + 1 :]]
    return Planted(_tag(s, "scaffold", v), "reasoning", "scaffold_supervised")


def malformed_tool_call(w: World, v: int) -> Planted:
    """What an undertrained target writes: a section that stops after `functions.`."""
    s = w.pick(v)
    vocab = w.renderer.tokenizer.get_vocab()
    close = vocab["</think>"]
    head = s.output_ids[: s.output_ids.index(close) + 1] if close in s.output_ids else []
    s.output_ids = [
        *head,
        vocab["<|tool_calls_section_begin|>"],
        vocab["<|tool_call_begin|>"],
        *w.renderer.encode("functions."),
        vocab["<|im_end|>"],
    ]
    return Planted(_tag(s, "badcall", v), "tool-calls", "malformed_tool_call")


def undeclared_call(w: World, v: int) -> Planted:
    c = w.conv(v, _tooled)
    msgs = copy.deepcopy(c.messages)
    turn = next(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    call = msgs[turn]["tool_calls"][0]
    call["function"]["name"] = "launch_rocket"
    call["id"] = "functions.launch_rocket:0"
    s = reference_sample(w.renderer, c, msgs[: turn + 1])
    return Planted(_tag(s, "undeclared", v), "tool-calls", "undeclared_function")


def bad_arguments(w: World, v: int) -> Planted:
    c = w.conv(v, _tooled)
    msgs = copy.deepcopy(c.messages)
    turn = next(i for i, m in enumerate(msgs) if m.get("tool_calls"))
    msgs[turn]["tool_calls"][0]["function"]["arguments"] = '{"location": '
    s = reference_sample(w.renderer, c, msgs[: turn + 1])
    return Planted(_tag(s, "badargs", v), "tool-calls", "bad_arguments")


def markers_only(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.output_ids = w.ids("</think>", "<|im_end|>")
    s.matched_stop = s.output_ids[-1]
    return Planted(_tag(s, "markers", v), "empty-output", "markers_only")


def empty_output(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.output_ids = s.output_ids[-1:]
    return Planted(_tag(s, "empty", v), "empty-output", "empty_output")


def aborted(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.finish_reason = "abort"
    return Planted(_tag(s, "abort", v), "aborted", "aborted")


# -- data bugs ----------------------------------------------------------------------------------


def duplicate_across_datasets(w: World, v: int) -> Planted:
    """The same conversation in two datasets: same prompt and output under another id."""
    s = w.pick(v)
    others = sorted({x.dataset for x in w.clean} - {s.dataset})
    s.dataset = others[v % len(others)]
    return Planted(_tag(s, "dup", v), "duplicates", "duplicate_sample")


def duplicate_id(w: World, v: int) -> Planted:
    s = w.pick(v)
    s.output_ids = [*s.output_ids[:-1], *w.renderer.encode(" again"), s.output_ids[-1]]
    return Planted(s, "duplicates", "duplicate_id")


PLANTS: dict[str, Callable[[World, int], Planted]] = {
    f.__name__: f
    for f in (
        glaive_in_system,
        hermes_in_system,
        json_declaration,
        tools_not_declared,
        system_missing,
        control_token_in_user_text,
        split_marker,
        no_user_turn,
        template_drift,
        literal_none_reasoning,
        unrecorded_truncation,
        finish_reason_missing,
        repetition_loop,
        missing_stop_token,
        loss_mask_length,
        loss_mask_off_by_one,
        reasoning_lost,
        duplicate_think,
        scaffold_supervised,
        malformed_tool_call,
        undeclared_call,
        bad_arguments,
        markers_only,
        empty_output,
        aborted,
        duplicate_across_datasets,
        duplicate_id,
    )
}


# -- clean controls -----------------------------------------------------------------------------


def sampled_output(w: World, v: int) -> Sample:
    """A temperature > 0 sample: the same text split into tokens other than the canonical
    encoding (as sampling produces), and a recorded temperature."""
    rng = random.Random(v)
    s = w.pick(v, lambda s: len(s.output_ids) > 8)
    tok = w.renderer.tokenizer
    special = set(w.renderer.model_format.marker_ids(tok).values())
    splittable = [
        i for i, t in enumerate(s.output_ids) if t not in special and len(tok.decode([t])) > 2
    ]
    # At least one token is split, or the control would duplicate its clean sample.
    chosen = {i for i in splittable if rng.random() < 0.3} or set(splittable[:1])
    out = []
    for i, t in enumerate(s.output_ids):
        if i in chosen:
            piece = tok.decode([t])
            out += w.renderer.encode(piece[:1]) + w.renderer.encode(piece[1:])
        else:
            out.append(t)
    s.output_ids = out
    s.sampling = {"temperature": 0.8, "top_p": 0.95, "max_new_tokens": 512}
    return _tag(s, "sampled", v)


def json_tool_result(w: World, v: int) -> Sample:
    """Tool results are legitimate JSON, schemas included."""
    c = w.conv(v, lambda c: any(m["role"] == "tool" for m in c.messages))
    msgs = copy.deepcopy(c.messages)
    tool = next(m for m in msgs if m["role"] == "tool")
    tool["content"] = json.dumps(
        {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "result": {"type": "str", "value": 3},
        }
    )
    return _tag(reference_sample(w.renderer, c, msgs), "jsonresult", v)


def multi_turn_masked(w: World, v: int) -> Sample:
    """One sample holding two regenerated turns of a prefix-stable history (turns without
    reasoning render the same in history): the user turn between them is unsupervised and
    each trained span ends on the stop token."""
    r = w.renderer

    def stable(c: Conversation) -> bool:
        assistants = [m for m in c.messages if m["role"] == "assistant"]
        return len(assistants) >= 2 and not any(m.get("reasoning_content") for m in assistants)

    c = w.conv(v, stable)
    msgs, _ = r.prepare_messages(c.messages)
    t0, t1 = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][:2]
    first = r.encode(r.render_text(msgs[:t0], c.tools))
    out1 = r.encode(r.model_format.completion_text(msgs[t0]))
    second = r.encode(r.render_text(msgs[:t1], c.tools))
    if second[: len(first) + len(out1)] != first + out1:
        raise ValueError(f"{c.id}: the template is not prefix-stable for this conversation")
    delta = second[len(first) + len(out1) :]
    out2 = r.encode(r.model_format.completion_text(msgs[t1]))
    return Sample(
        id=f"{c.id}-mt{v}",
        dataset=c.dataset,
        prompt_ids=first,
        output_ids=out1 + delta + out2,
        finish_reason="stop",
        matched_stop=out2[-1],
        messages=c.messages[: t1 + 1],
        tools=c.tools,
        backend="sglang",
        sampling={"temperature": 0.0, "max_new_tokens": 512},
        loss_mask=[1] * len(out1) + [0] * len(delta) + [1] * len(out2),
        turn=-1,
    )


CONTROLS: dict[str, Callable[[World, int], Sample]] = {
    f.__name__: f for f in (sampled_output, json_tool_result, multi_turn_masked, healthy_cut)
}
# What a control is rightly told (a warning that states a fact about it, never a quarantine):
# a healthy output cut at max_new_tokens is reported as cut, and trained.
CONTROL_WARNINGS: dict[str, set[tuple[str, str]]] = {"healthy_cut": {("truncation", "truncated")}}
