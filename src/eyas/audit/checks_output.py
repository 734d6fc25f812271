"""Checks of what the target generated. They work on token ids (vectorized where it pays), so
they judge every sample: a malformed generation is always found and can be quarantined."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from eyas.audit.check import Check, Hit, Systemic, register, share_lower_bound
from eyas.audit.context import AuditContext
from eyas.store.loops import Loop, find_loop


@register
class StopToken(Check):
    """A `stop` sample ends in one of the target's stop tokens (SGLang and vLLM keep the
    matched stop id in the output ids); without it the drafter never learns to end a turn."""

    name = "stop-token"
    needs = frozenset({"stop_ids"})
    reasons = {
        "missing_stop_token": "finish_reason is stop but the output does not end in a stop token"
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        last = ctx.last_tokens(ctx.table.output)
        stops = np.fromiter(ctx.stop_ids, dtype=np.int64)
        ends_in_stop = np.isin(last, stops)
        for i in idx:
            i = int(i)
            matched = ctx.table.matched_stop[i]
            if ctx.table.finish_reason[i] != "stop" or isinstance(matched, str):
                continue  # a stop *string* match leaves no stop id (other producers)
            if not ends_in_stop[i]:
                yield Hit(i, "error", "missing_stop_token")


def loops(ctx: AuditContext) -> dict[int, Loop]:
    """Rows of the whole table whose output ends in a repetition loop (computed once per
    audit; the repetition and truncation checks share it)."""
    if "loops" not in ctx.cache:
        t = ctx.table
        found = {}
        for i in range(len(t)):
            loop = find_loop(t.output.row(i), drop_last=t.finish_reason[i] == "stop")
            if loop is not None:
                found[i] = loop
        ctx.cache["loops"] = found
    return ctx.cache["loops"]


@register
class Truncation(Check):
    """Outputs cut at max_new_tokens. A cut loop is the repetition check's (quarantined, not
    counted here: a higher cap cannot end a loop). A healthy cut output is a warning and trains
    by default (`--truncated train`). Many of them is systemic: judged, like the quarantine
    share, on the 95% Wilson lower bound of their share among the outputs that are not loops,
    so two cut outputs of 16 are a few long answers, 2,000 of 16,000 a cap that is too low."""

    name = "truncation"
    reasons = {
        "truncated": "outputs cut at max_new_tokens that are not loops (trained by default; "
        "--truncated skip leaves them out)",
        "unrecorded_truncation": "outputs at the max_new_tokens cap without a stop token, "
        "recorded as finished",
        "finish_reason_missing": "no finish_reason recorded: a cut output cannot be told from "
        "a finished one",
        "truncation_rate": "too many healthy outputs stopped at max_new_tokens: raise "
        "max_new_tokens",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit | Systemic]:
        t = ctx.table
        last = ctx.last_tokens(t.output)
        stops = np.fromiter(ctx.stop_ids, dtype=np.int64) if ctx.stop_ids else None
        looping = loops(ctx)
        truncated = cut_loops = 0
        for i in idx:
            i = int(i)
            finish = t.finish_reason[i]
            if finish == "length":
                if i in looping:
                    cut_loops += 1
                    continue
                truncated += 1
                yield Hit(i, "warning", "truncated")
            elif finish is None:
                yield Hit(i, "error", "finish_reason_missing")
            elif finish == "stop":
                cap = t.sampling(i).get("max_new_tokens")
                at_cap = isinstance(cap, int) and cap > 0 and t.output.lengths[i] >= cap
                if at_cap and (stops is None or not np.isin(last[i], stops)):
                    yield Hit(i, "error", "unrecorded_truncation")
        judged = max(1, len(idx) - sum(int(i) in looping for i in idx))
        rate, bound = truncated / judged, share_lower_bound(truncated, judged)
        limit = ctx.options.truncation_error_rate
        if bound > limit:
            loops_note = (
                f"; {cut_loops} cut repetition loops are quarantined, not counted"
                if cut_loops
                else ""
            )
            yield Systemic(
                "error",
                "truncation_rate",
                f"{rate:.1%} of the outputs that are not loops stopped at max_new_tokens (95% "
                f"lower bound {bound:.1%}, over {limit:.0%}){loops_note}: raise "
                "max_new_tokens; the cut outputs train as they are unless --truncated skip",
                truncated,
                judged,
                data={"rate": round(rate, 4), "lower_bound": round(bound, 4), "loops": cut_loops},
            )


@register
class LossMask(Check):
    """A loss mask has one 0/1 per output token, and its trained spans are whole generated
    turns: each starts at a generated token and ends on the turn's stop token (an off-by-one
    mask trains on the prompt and skips the end of turn)."""

    name = "loss-mask"
    reasons = {
        "loss_mask_length": "loss_mask length differs from the output's",
        "loss_mask_values": "loss_mask holds values other than 0 and 1",
        "loss_mask_misaligned": "a trained span does not start at the first generated token "
        "or does not end on a stop token",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        t = ctx.table
        for i in idx:
            i = int(i)
            if not t.loss_mask.present(i):
                continue
            mask, out = t.loss_mask.row(i), t.output.row(i)
            if len(mask) != len(out):
                yield Hit(i, "error", "loss_mask_length")
                continue
            if not np.isin(mask, (0, 1)).all():
                yield Hit(i, "error", "loss_mask_values")
                continue
            if len(mask) and mask[0] != 1:
                yield Hit(i, "error", "loss_mask_misaligned")
                continue
            if ctx.stop_ids:
                ends = np.nonzero((mask[:-1] == 1) & (mask[1:] == 0))[0]
                if any(int(out[e]) not in ctx.stop_ids for e in ends):
                    yield Hit(i, "error", "loss_mask_misaligned")


@register
class Reasoning(Check):
    """Reasoning blocks, judged at the think marker ids:
    - a thinking prompt whose output never closes `</think>` lost its reasoning (the
      chat-completions round trip drops it), unless it was cut at max_new_tokens;
    - a think block opened twice, or left open;
    - an empty `<think></think>` inside the supervised tokens trains a prompt scaffold;
    - and, on decoded prompts: reasoning rendered as the text "None", history reasoning the
      template keeps but the prompt lacks, /think switches the model does not read."""

    name = "reasoning"
    needs = frozenset({"tokenizer"})
    reasons = {
        "reasoning_lost": "a thinking prompt whose output has no </think>: the reasoning was lost",
        "duplicate_think": "a think block opened or closed more than once",
        "unclosed_think": "a think block opened in the output and never closed",
        "reasoning_empty": "thinking-mode output that closes </think> at once although the "
        "source reasoned",
        "scaffold_supervised": "an empty <think></think> scaffold is inside the supervised tokens",
        "literal_none": "the literal text 'None' rendered as reasoning",
        "history_reasoning_dropped": "reasoning missing from history turns where the template "
        "keeps it",
        "foreign_thinking_switch": "/think or /no_think text in user turns; this model reads "
        "its template switch instead",
    }

    @staticmethod
    def _segments(ctx: AuditContext, i: int):
        """(the ids before each generated turn, the turn's ids, whether it finished) for the
        sample's generated turns: its whole output, or each trained span of a loss mask."""
        t = ctx.table
        prompt, out = t.prompt.row(i), t.output.row(i)
        finished = t.finish_reason[i] == "stop"
        if not t.loss_mask.present(i) or not t.mask_ok(i):
            yield prompt, out, finished
            return
        mask = t.loss_mask.row(i)
        starts = np.nonzero(np.diff(np.concatenate([[0], mask])) == 1)[0]
        ends = np.nonzero(np.diff(np.concatenate([mask, [0]])) == -1)[0] + 1
        for a, b in zip(starts, ends):
            before = np.concatenate([prompt, out[:a]])[-8:]
            yield before, out[a:b], finished or b < len(out)

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        open_id = ctx.marker_ids.get(ctx.model_format.think_open or "")
        close_id = ctx.marker_ids.get(ctx.model_format.think_close or "")
        if open_id is None or close_id is None:
            return
        fmt = ctx.model_format
        for i in idx:
            i = int(i)
            reasons: set[str] = set()
            for before, seg, complete in self._segments(ctx, i):
                thinking = False
                o, c = int((seg == open_id).sum()), int((seg == close_id).sum())
                if len(before) and before[-1] == open_id:  # the prompt opened the block (K2.5)
                    if c == 0 and complete:
                        reasons.add("reasoning_lost")
                    elif c > 1 or o > 0:
                        reasons.add("duplicate_think")
                    elif (
                        c == 1
                        and seg[0] == close_id
                        and ctx.source_turn(i).get("reasoning_content")
                    ):
                        yield Hit(i, "warning", "reasoning_empty")
                elif thinking := fmt.thinking_prompt(before, ctx.tokenizer):
                    if o == 0 and c == 0 and complete:
                        reasons.add("reasoning_lost")
                    elif o > 1 or c > 1:
                        reasons.add("duplicate_think")
                    elif o > c and complete:
                        reasons.add("unclosed_think")
                elif o > 1 or c > 1:
                    reasons.add("duplicate_think")
                elif o != c and complete:
                    reasons.add("unclosed_think")
                pairs = np.nonzero((seg[:-1] == open_id) & (seg[1:] == close_id))[0]
                # an empty think block generated and trained: a prompt scaffold, unless the
                # format itself writes empty reasoning that way
                if len(pairs) and not (fmt.generates_empty_think and thinking):
                    reasons.add("scaffold_supervised")
            for reason in sorted(reasons):
                yield Hit(i, "error", reason)
        for i in ctx.sample_of(idx):
            i = int(i)
            for text in (ctx.prompt_text(i), ctx.output_text(i)):
                if "<think>None</think>" in text or text.startswith("None</think>"):
                    yield Hit(i, "error", "literal_none")
                    break
            prompt = ctx.prompt_text(i)
            if any(r.strip() not in prompt for r in fmt.kept_history_reasoning(ctx.history(i))):
                yield Hit(i, "error", "history_reasoning_dropped")
            if fmt.foreign_switch is not None and any(
                fmt.foreign_switch.search(u) for u in fmt.user_bodies(ctx.turns(i))
            ):
                yield Hit(i, "warning", "foreign_thinking_switch")


_JSON_TYPES = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}


def schema_problems(args: dict, schema: dict) -> list[str]:
    problems = []
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in args:
            problems.append(f"missing required {key!r}")
    for key, value in args.items():
        spec = props.get(key)
        if spec is None:
            if schema.get("additionalProperties") is False:
                problems.append(f"unknown argument {key!r}")
            continue
        want = spec.get("type") if isinstance(spec, dict) else None
        types = _JSON_TYPES.get(want) if isinstance(want, str) else None
        if types and (
            not isinstance(value, types) or (want != "boolean" and isinstance(value, bool))
        ):
            problems.append(f"{key!r} is not {want}")
        if isinstance(spec, dict) and "enum" in spec and value not in spec["enum"]:
            problems.append(f"{key!r} not in enum")
    return problems


@register
class ToolCalls(Check):
    """Generated tool calls, parsed by the model format at its marker ids. Every sample whose
    output contains a call marker is parsed (the rest need no decoding)."""

    name = "tool-calls"
    needs = frozenset({"tokenizer"})
    reasons = {
        "malformed_tool_call": "malformed tool-call section (unterminated, empty or stray tokens)",
        "bad_arguments": "tool-call arguments that are not a JSON object",
        "undeclared_function": "calls to a function the prompt does not declare",
        "bad_call_id": "tool calls without a parseable function name or id",
        "arguments_schema": "arguments that violate the declared schema",
        "tool_call_missing": "the source turn called tools but the output has no tool call",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        fmt, t = ctx.model_format, ctx.table
        call_markers = {
            ctx.marker_ids[m]
            for m in ("<|tool_calls_section_begin|>", "<tool_call>")
            if m in ctx.marker_ids
        }
        if not call_markers:
            return
        with_calls = ctx.count_ids(t.output, call_markers) > 0
        for i in idx:
            i = int(i)
            expected = bool(ctx.source_turn(i).get("tool_calls"))
            if not with_calls[i]:
                if expected and t.finish_reason[i] == "stop":
                    yield Hit(i, "warning", "tool_call_missing")
                continue
            tools = {
                tl["function"]["name"]: tl["function"].get("parameters") or {}
                for tl in t.tools(i)
                if isinstance(tl, dict) and "function" in tl
            }
            parsed = fmt.parse_output(t.output.row(i).tolist(), ctx.tokenizer, ctx.stop_ids)
            reasons: set[str] = set()
            if parsed.malformed and (t.finish_reason[i] == "stop" or not parsed.calls):
                reasons.add("malformed_tool_call")
            for call in parsed.calls:
                if call.name is None:
                    reasons.add("bad_call_id")
                elif call.name not in tools:
                    reasons.add("undeclared_function")
                if not call.valid_json:
                    reasons.add("bad_arguments")
                elif call.name in tools and schema_problems(call.arguments_json, tools[call.name]):
                    yield Hit(i, "warning", "arguments_schema")
            if expected and not parsed.calls:
                yield Hit(i, "warning", "tool_call_missing")
            for reason in sorted(reasons):
                yield Hit(i, "error", reason)


@register
class EmptyOutput(Check):
    name = "empty-output"
    reasons = {
        "empty_output": "outputs with no supervised content (empty, only a stop token, or an "
        "all-zero loss mask)",
        "markers_only": "outputs made only of control tokens (e.g. `</think><|im_end|>`)",
        "prompt_supervised": "every token of every sample is supervised (prompt included?)",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit | Systemic]:
        t = ctx.table
        markers = set(ctx.marker_ids.values()) | set(ctx.stop_ids)
        non_marker = ctx.row_counts(
            t.output, ~np.isin(t.output.values, np.fromiter(markers, np.int64))
        )
        non_stop = ctx.row_counts(
            t.output, ~np.isin(t.output.values, np.fromiter(ctx.stop_ids, np.int64))
        )
        everything = 0
        for i in idx:
            i = int(i)
            supervised = t.supervised(i).any() if t.mask_ok(i) else True
            if not supervised or non_stop[i] == 0:
                yield Hit(i, "error", "empty_output")
            elif markers and non_marker[i] == 0 and t.finish_reason[i] == "stop":
                yield Hit(i, "error", "markers_only")
            everything += int(t.prompt.lengths[i] == 0)
        if everything and everything == len(idx):
            yield Systemic(
                "warning",
                "prompt_supervised",
                self.reasons["prompt_supervised"],
                everything,
                len(idx),
            )


@register
class Repetition(Check):
    """An output whose tail repeats one span of token ids (`eyas.store.loops`: a period of at
    most 256 tokens, at least 3 copies and 48 tokens, to the end of the output). Greedy
    decoding's degenerate mode: trivially predictable tokens that inflate acceptance, never
    worth training. The repeated span is shown in the report and by `eyas show`."""

    name = "repetition"
    reasons = {
        "repetition_loop": "outputs whose tail repeats one span of tokens (a repetition loop; "
        "never trained)"
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        looping = loops(ctx)
        for i in idx:
            loop = looping.get(int(i))
            if loop is not None:
                yield Hit(int(i), "error", "repetition_loop", describe_loop(ctx, int(i), loop))


def describe_loop(ctx: AuditContext, i: int, loop: Loop) -> str:
    ids = loop.span(ctx.table.output.row(i))
    text = ctx.tokenizer.decode(ids) if ctx.tokenizer is not None else str(ids)
    if len(text) > 160:
        text = text[:157] + "..."
    return f"{loop.period} tokens x {loop.repeats:.1f} from token {loop.start}: {text!r}"


@register
class Aborted(Check):
    name = "aborted"
    reasons = {"aborted": "samples whose generation was aborted by the server"}

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        for i in idx:
            if ctx.table.finish_reason[int(i)] == "abort":
                yield Hit(int(i), "error", "aborted")


@register
class ContextLength(Check):
    name = "context-length"
    reasons = {"over_context_length": "sequences longer than the planned length"}

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        limit = ctx.options.max_len
        if not limit:
            return
        total = ctx.table.prompt.lengths + ctx.table.output.lengths
        for i in idx:
            if total[int(i)] > limit:
                yield Hit(int(i), "error", "over_context_length")
