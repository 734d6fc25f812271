"""Audit checks: one function each, `check(ctx, dataset, idx) -> list[Finding]`.

Check names are stable (design.md §8); tests and CI gates depend on them. Checks that must
decode or re-render look at an evenly spread sample per dataset and say so in the message.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable

import numpy as np

from eyas.audit.context import AuditContext, Finding

Check = Callable[[AuditContext, str, np.ndarray], list[Finding]]

# Tool definitions or calls written as text in a format other than the model's native one.
_SIGNATURES = {
    "glaive": re.compile(
        r"with access to the following functions|<functioncall>|FUNCTION RESPONSE:"
    ),
    "hermes": re.compile(r"<tools>|</tools>|<tool_call>|<tool_response>"),
    "json_schema": re.compile(
        r'"name"\s*:\s*"[^"]{1,80}"\s*,.{0,600}?"parameters"\s*:\s*\{', re.DOTALL
    ),
    "xlam_types": re.compile(r'"type"\s*:\s*"(?:str|int|float|bool|List\[|Dict\[)[^"]*"'),
}
_QWEN_NATIVE = ("hermes",)  # Qwen3 declares tools in <tools> XML itself


def _tool_text_turns(ctx: AuditContext, i: int) -> list[tuple[str, str]]:
    turns = ctx.turns(i)
    if ctx.profile.name.startswith("kimi"):
        return [(lab, body) for lab, body in turns if lab != "tool_declare"]
    if ctx.profile.name == "qwen3":
        cleaned = []
        for lab, body in turns:
            body = re.sub(
                r"# Tools\n\nYou may call one or more functions.*?</tool_call>",
                "",
                body,
                flags=re.DOTALL,
            )
            cleaned.append((lab, body))
        return cleaned
    return turns


def check_tool_format(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None:
        return []
    checked = ctx.sample_of(idx)
    hits: dict[str, list[int]] = {}
    json_declare: list[int] = []
    for i in checked:
        i = int(i)
        for _label, body in _tool_text_turns(ctx, i):
            for kind, pattern in _SIGNATURES.items():
                if ctx.profile.name == "qwen3" and kind in _QWEN_NATIVE:
                    continue
                if pattern.search(body):
                    hits.setdefault(kind, []).append(i)
        if ctx.profile.declaration == "typescript":
            for label, body in ctx.turns(i):
                if label == "tool_declare" and body.lstrip()[:1] in ("[", "{"):
                    json_declare.append(i)
    out = []
    note = ctx.sampled_note(checked, idx)
    for kind, found in sorted(hits.items()):
        found = sorted(set(found))
        out.append(
            ctx.finding(
                "tool-format",
                "error",
                name,
                found,
                len(checked),
                f"{kind} tool definitions or calls written as text in the prompt "
                f"instead of native declarations{note}",
            )
        )
    if json_declare:
        out.append(
            ctx.finding(
                "tool-format",
                "error",
                name,
                json_declare,
                len(checked),
                "tool_declare body is JSON, not the TypeScript declaration "
                f"{ctx.profile.name} was trained on{note}",
            )
        )
    return out


def check_tools_ignored(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None:
        return []
    checked = [int(i) for i in ctx.sample_of(idx) if ctx.table.tools(int(i))]
    hits = []
    for i in checked:
        text = ctx.prompt_text(i)
        if ctx.profile.name.startswith("kimi"):
            declared = any(lab == "tool_declare" for lab, _ in ctx.turns(i))
        elif ctx.profile.name == "qwen3":
            declared = "<tools>" in text
        else:
            names = [t["function"]["name"] for t in ctx.table.tools(i) if "function" in t]
            declared = any(n in text for n in names)
        if not declared:
            hits.append(i)
    if not hits:
        return []
    return [
        ctx.finding(
            "tools-ignored",
            "error",
            name,
            hits,
            len(checked),
            "the conversation has tools but the prompt declares none",
        )
    ]


def check_system_prompt(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None:
        return []
    checked = ctx.sample_of(idx)
    missing, overridden, injected = [], [], []
    default = ctx.default_system_body()
    for i in checked:
        i = int(i)
        msgs = ctx.table.messages(i)
        source = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else None
        bodies = [body for lab, body in ctx.turns(i) if lab == "system"] or [ctx.prompt_text(i)]
        has_default = default is not None and any(default in b for b in bodies)
        if isinstance(source, str) and source.strip():
            if not any(source.strip() in b for b in bodies):
                missing.append(i)
            if has_default and default not in source:
                overridden.append(i)
        elif has_default:
            injected.append(i)
    note = ctx.sampled_note(checked, idx)
    out = []
    if missing:
        out.append(
            ctx.finding(
                "system-prompt",
                "error",
                name,
                missing,
                len(checked),
                f"the source system prompt is missing from the rendered prompt{note}",
            )
        )
    if overridden:
        out.append(
            ctx.finding(
                "system-prompt",
                "warning",
                name,
                overridden,
                len(checked),
                f"the template's default system prompt was injected although the "
                f"source had its own{note}",
            )
        )
    if injected:
        out.append(
            ctx.finding(
                "system-prompt",
                "info",
                name,
                injected,
                len(checked),
                f"no source system prompt; the template injected its default {default!r}{note}",
            )
        )
    return out


def check_special_tokens(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None:
        return []
    out = []
    broken = [
        m
        for m in ctx.profile.markers
        if len(ctx.tokenizer(m, add_special_tokens=False)["input_ids"]) != 1
    ]
    if broken:
        out.append(
            Finding(
                "special-tokens",
                "error",
                name,
                len(broken),
                len(ctx.profile.markers),
                [],
                f"control tokens that do not encode to one token: {broken}",
            )
        )
    checked = ctx.sample_of(idx)
    hits = []
    for i in checked:
        i = int(i)
        for ids, text in (
            (ctx.table.prompt.row(i), ctx.prompt_text(i)),
            (ctx.table.output.row(i), ctx.output_text(i)),
        ):
            # cheap text test first; count ids only for markers the text contains
            if any(
                (c := text.count(m)) and c > int((ids == mid).sum())
                for m, mid in ctx.marker_ids.items()
            ):
                hits.append(i)
                break
    if hits:
        out.append(
            ctx.finding(
                "special-tokens",
                "error",
                name,
                hits,
                len(checked),
                "marker text present as several ordinary tokens (re-tokenized "
                f"text?){ctx.sampled_note(checked, idx)}",
            )
        )
    return out


def check_truncation(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    t = ctx.table
    hits = [int(i) for i in idx if t.finish_reason[i] == "length"]
    if not hits:
        return []
    lengths = t.output.lengths[idx]
    caps = np.array([t.sampling(int(i)).get("max_new_tokens", -1) for i in idx])
    at_cap = int(((lengths == caps) & (caps > 0)).sum())
    rate = len(hits) / len(idx)
    severity = "error" if rate > ctx.options.truncation_error_rate else "warning"
    return [
        ctx.finding(
            "truncation",
            severity,
            name,
            hits,
            len(idx),
            f"{rate:.1%} of outputs stopped at max_new_tokens (finish_reason length); "
            f"{at_cap} outputs are exactly at the cap",
            rate=round(rate, 4),
            at_cap=at_cap,
        )
    ]


def _stats(lengths: np.ndarray) -> dict:
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


def check_length(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    t = ctx.table
    prompt, output = t.prompt.lengths[idx], t.output.lengths[idx]
    finishes = Counter(t.finish_reason[int(i)] for i in idx)
    ps, os_ = _stats(prompt), _stats(output)
    return [
        Finding(
            "length",
            "info",
            name,
            len(idx),
            len(idx),
            [],
            f"prompt tokens median {ps.get('median', 0):.0f} p99 {ps.get('p99', 0):.0f}; "
            f"output tokens median {os_.get('median', 0):.0f} p90 {os_.get('p90', 0):.0f} "
            f"p99 {os_.get('p99', 0):.0f} max {os_.get('max', 0)}; "
            f"{os_.get('share_under_500', 0):.0%} of outputs under 500 tokens",
            {"prompt": ps, "output": os_, "finish_reasons": dict(finishes)},
        )
    ]


def check_reasoning(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    open_id = ctx.marker_ids.get("<think>")
    close_id = ctx.marker_ids.get("</think>")
    if open_id is None or close_id is None or ctx.tokenizer is None:
        return []
    t = ctx.table
    no_reasoning, lost, scaffold, literal_none, dropped, switch = [], [], [], [], [], []
    thinking = 0
    checked = ctx.sample_of(idx)
    # Vectorized over the flat id arrays: last prompt token, first output token.
    p_len, o_len = t.prompt.lengths[idx], t.output.lengths[idx]
    last_prompt = np.where(
        p_len > 0, t.prompt.values[np.maximum(t.prompt.offsets[idx + 1] - 1, 0)], -1
    )
    first_out = np.where(
        o_len > 0,
        t.output.values[np.minimum(t.output.offsets[idx], max(len(t.output.values) - 1, 0))],
        -1,
    )
    in_thinking = last_prompt == open_id
    thinking = int(in_thinking.sum())
    for i in idx[in_thinking & (first_out == close_id)]:
        i = int(i)
        msgs, turn = t.messages(i), int(t.turn[i])
        source = msgs[turn] if 0 <= turn < len(msgs) else {}
        (lost if source.get("reasoning_content") else no_reasoning).append(i)
    # An empty think block inside the supervised output is a prompt scaffold being trained.
    v = t.output.values
    pair = np.zeros(len(v), dtype=bool)
    if len(v) > 1:
        pair[:-1] = (v[:-1] == open_id) & (v[1:] == close_id)
    for i in idx[ctx.row_any(t.output, pair, idx)]:
        i = int(i)
        output, sup = t.output.row(i), t.supervised(i)
        pairs = np.nonzero((output[:-1] == open_id) & (output[1:] == close_id))[0]
        if any(sup[p] and sup[p + 1] for p in pairs):
            scaffold.append(i)
    for i in checked:
        i = int(i)
        for text in (ctx.prompt_text(i), ctx.output_text(i)):
            if "<think>None</think>" in text or text.startswith("None</think>"):
                literal_none.append(i)
                break
        if ctx.profile.name.startswith("kimi"):
            msgs = ctx.table.messages(i)
            turn = int(t.turn[i])
            history = msgs[:turn] if turn >= 0 else msgs
            split = max(
                (
                    k
                    for k, m in enumerate(history)
                    if m.get("role") == "assistant" and not m.get("tool_calls")
                ),
                default=-1,
            )
            kept = [
                m.get("reasoning_content")
                for m in history[split + 1 :]
                if m.get("role") == "assistant" and m.get("reasoning_content")
            ]
            text = ctx.prompt_text(i)
            if any(r.strip() not in text for r in kept):
                dropped.append(i)
            users = [b for lab, b in ctx.turns(i) if lab == "user"]
            if any(re.search(r"(^|\s)/(no_)?think\b", u) for u in users):
                switch.append(i)
    out = []
    if lost:
        out.append(
            ctx.finding(
                "reasoning",
                "warning",
                name,
                lost,
                thinking,
                "thinking-mode outputs with no reasoning although the source turn reasoned",
            )
        )
    if no_reasoning:
        out.append(
            ctx.finding(
                "reasoning",
                "info",
                name,
                no_reasoning,
                thinking,
                "thinking-mode outputs that close </think> at once (no reasoning)",
            )
        )
    if scaffold:
        out.append(
            ctx.finding(
                "reasoning",
                "error",
                name,
                scaffold,
                len(idx),
                "an empty <think></think> scaffold is inside the supervised tokens",
            )
        )
    note = ctx.sampled_note(checked, idx)
    if literal_none:
        out.append(
            ctx.finding(
                "reasoning",
                "error",
                name,
                literal_none,
                len(checked),
                f"the literal text 'None' rendered as reasoning{note}",
            )
        )
    if dropped:
        out.append(
            ctx.finding(
                "reasoning",
                "error",
                name,
                dropped,
                len(checked),
                f"reasoning missing from history turns where the template keeps it{note}",
            )
        )
    if switch:
        out.append(
            ctx.finding(
                "reasoning",
                "warning",
                name,
                switch,
                len(checked),
                f"/think or /no_think text in user turns; {ctx.profile.name} uses "
                f"the `{ctx.profile.thinking_key}` switch{note}",
            )
        )
    return out


_JSON_TYPES = {
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "array": list,
    "object": dict,
}


def _schema_problems(args: dict, schema: dict) -> list[str]:
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


def check_tool_calls(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None or ctx.profile.tool_parser != "kimi_k2":
        return []
    from eyas.tools.parse import parse_kimi_output

    checked = ctx.sample_of(idx)
    undeclared, bad_json, schema_bad, bad_ids, malformed, absent = [], [], [], [], [], []
    expected = 0
    t = ctx.table
    section = ctx.marker_ids.get("<|tool_calls_section_begin|>")
    for i in checked:
        i = int(i)
        msgs, turn = t.messages(i), int(t.turn[i])
        source = msgs[turn] if 0 <= turn < len(msgs) else {}
        has_section = section is not None and bool((t.output.row(i) == section).any())
        if source.get("tool_calls"):
            expected += 1
            if not has_section:
                absent.append(i)
        if not has_section:
            continue  # nothing to parse: the common case, kept cheap
        tools = {
            tl["function"]["name"]: tl["function"].get("parameters") or {}
            for tl in t.tools(i)
            if "function" in tl
        }
        parsed = parse_kimi_output(t.output.row(i).tolist(), ctx.tokenizer, ctx.stop_ids or None)
        if source.get("tool_calls") and not parsed.calls:
            absent.append(i)
        if parsed.malformed:
            malformed.append(i)
        for call in parsed.calls:
            if call.name is None:
                bad_ids.append(i)
            elif call.name not in tools:
                undeclared.append(i)
            if not call.valid_json:
                bad_json.append(i)
            elif call.name in tools and _schema_problems(call.arguments_json, tools[call.name]):
                schema_bad.append(i)
    note = ctx.sampled_note(checked, idx)
    n = len(checked)
    out = []
    for hits, sev, msg in (
        (undeclared, "error", "calls to a function the prompt does not declare"),
        (bad_json, "error", "tool-call arguments that are not a JSON object"),
        (bad_ids, "error", "tool-call ids not of the form functions.NAME:N"),
        (malformed, "error", "malformed tool-call section (unterminated or stray tokens)"),
        (schema_bad, "warning", "arguments that violate the declared schema"),
    ):
        if hits:
            out.append(ctx.finding("tool-calls", sev, name, sorted(set(hits)), n, msg + note))
    if absent:
        out.append(
            ctx.finding(
                "tool-calls",
                "warning",
                name,
                absent,
                expected,
                f"the source turn called tools but the output has no tool call{note}",
            )
        )
    return out


def check_template_drift(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.renderer is None:
        return []
    out = []
    render = ctx.table.manifest.get("render") or {}
    for key, mine in (
        ("tokenizer_sha256", ctx.renderer.fingerprint),
        ("template_sha256", ctx.renderer.template_sha256),
    ):
        if render.get(key) and render[key] != mine:
            out.append(
                Finding(
                    "template-drift",
                    "error",
                    name,
                    len(idx),
                    len(idx),
                    [],
                    f"the data was rendered with {key} {render[key][:12]}…, the model "
                    f"has {mine[:12]}…",
                )
            )
    t = ctx.table
    checked = [
        int(i)
        for i in ctx.sample_of(idx, min(ctx.options.decode_sample, 400), decode=False)
        if int(t.turn[i]) >= 0 or not t.loss_mask.present(int(i))
    ]
    hits = []
    for i in checked:
        msgs, turn = t.messages(i), int(t.turn[i])
        if not msgs:
            continue
        history = msgs[:turn] if turn >= 0 else msgs
        try:
            prepared, _ = ctx.renderer.prepare_messages(history)
            ids = ctx.renderer.encode(ctx.renderer.render_text(prepared, t.tools(i)))
        except Exception:
            hits.append(i)
            continue
        if ids != t.prompt.row(i).tolist():
            hits.append(i)
    if hits:
        out.append(
            ctx.finding(
                "template-drift",
                "error",
                name,
                hits,
                len(checked),
                "prompt_ids differ from a fresh render with the model's template"
                f"{ctx.sampled_note(np.asarray(checked), idx)}",
            )
        )
    return out


def check_roundtrip(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    if ctx.tokenizer is None:
        return []
    checked = ctx.sample_of(idx)
    texts = [ctx.output_text(int(i)) for i in checked]
    again = ctx.encode_batch(texts) if texts else []
    hits = [
        int(i)
        for i, ids in zip(checked, again)
        if not np.array_equal(np.asarray(ids), ctx.table.output.row(int(i)))
    ]
    if not hits:
        return []
    return [
        ctx.finding(
            "roundtrip",
            "warning",
            name,
            hits,
            len(checked),
            "decode-then-encode of the output gives different ids (normal for "
            "sampled text at token boundaries; a high rate suggests ids were rebuilt "
            f"from text){ctx.sampled_note(checked, idx)}",
        )
    ]


def check_duplicates(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    t = ctx.table
    seen_ids: Counter = Counter(t.ids[int(i)] for i in idx)
    dup_ids = [int(i) for i in idx if seen_ids[t.ids[int(i)]] > 1]
    first: dict[bytes, int] = {}
    dup_content = []
    for i in idx:
        i = int(i)
        h = hashlib.blake2b(t.prompt.row(i).tobytes(), digest_size=16)
        h.update(b"|")
        h.update(t.output.row(i).tobytes())
        key = h.digest()
        if key in first and t.ids[first[key]] != t.ids[i]:
            dup_content.append(i)
        first.setdefault(key, i)
    out = []
    if dup_ids:
        out.append(
            ctx.finding(
                "duplicates", "error", name, dup_ids, len(idx), "the same id appears more than once"
            )
        )
    if dup_content:
        out.append(
            ctx.finding(
                "duplicates",
                "warning",
                name,
                dup_content,
                len(idx),
                "identical prompt and output under different ids",
            )
        )
    return out


def _looping(tail: np.ndarray, max_period: int = 8, repeats: int = 4) -> bool:
    """Do the last `repeats` periods of some length p <= max_period repeat exactly?
    (x has period p iff x[:-p] == x[p:])."""
    for p in range(1, max_period + 1):
        n = p * repeats
        if len(tail) >= n:
            window = tail[-n:]
            if np.array_equal(window[:-p], window[p:]):
                return True
    return False


def check_repetition(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    t = ctx.table
    hits = []
    for i in idx:
        i = int(i)
        out = t.output.row(i)
        if len(out) and int(out[-1]) in ctx.stop_ids:
            out = out[:-1]
        if len(out) >= 16 and _looping(out[-64:]):
            hits.append(i)
    if not hits:
        return []
    return [
        ctx.finding(
            "repetition",
            "warning",
            name,
            hits,
            len(idx),
            "outputs that end in a degenerate loop (a 1-8 token pattern repeated)",
        )
    ]


def check_empty_output(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    t = ctx.table
    stops = np.fromiter(ctx.stop_ids, dtype=np.int64) if ctx.stop_ids else np.zeros(0, np.int64)
    has_body = ctx.row_any(t.output, ~np.isin(t.output.values, stops), idx)
    if ctx.all_supervised():
        any_sup = t.output.lengths[idx] > 0
        everything = int((t.prompt.lengths[idx] == 0).sum())
    else:
        any_sup = np.array([bool(t.supervised(int(i)).any()) for i in idx], dtype=bool)
        everything = sum(
            1 for i in idx if len(t.prompt.row(int(i))) == 0 and t.supervised(int(i)).all()
        )
    empty = [int(i) for i, ok in zip(idx, has_body & any_sup) if not ok]
    out = []
    if empty:
        out.append(
            ctx.finding(
                "empty-output",
                "error",
                name,
                empty,
                len(idx),
                "outputs with no supervised content (empty, only a stop token, or "
                "an all-zero loss mask)",
            )
        )
    if everything and everything == len(idx):
        out.append(
            Finding(
                "empty-output",
                "warning",
                name,
                everything,
                len(idx),
                [],
                "every token of every sample is supervised (prompt included?)",
            )
        )
    return out


def check_aborted(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    hits = [int(i) for i in idx if ctx.table.finish_reason[int(i)] == "abort"]
    if not hits:
        return []
    return [
        ctx.finding(
            "aborted",
            "error",
            name,
            hits,
            len(idx),
            "samples whose generation was aborted by the server",
        )
    ]


def check_context_length(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    limit = ctx.options.max_len
    if not limit:
        return []
    total = ctx.table.prompt.lengths[idx] + ctx.table.output.lengths[idx]
    hits = [int(i) for i, n in zip(idx, total) if n > limit]
    if not hits:
        return []
    return [
        ctx.finding(
            "context-length",
            "error",
            name,
            hits,
            len(idx),
            f"sequences longer than the planned length {limit} tokens (longest {int(total.max())})",
        )
    ]


def check_lossy_backend(ctx: AuditContext, name: str, idx: np.ndarray) -> list[Finding]:
    lossy_run = bool((ctx.table.manifest.get("backend") or {}).get("lossy"))
    hits = [int(i) for i in idx if ctx.table.backend[int(i)] == "openai_chat" or lossy_run]
    if not hits:
        return []
    return [
        ctx.finding(
            "lossy-backend",
            "error",
            name,
            hits,
            len(idx),
            "samples produced through a chat-completions text round trip: output ids "
            "were re-tokenized from text, not sampled",
        )
    ]


CHECKS: dict[str, Check] = {
    "tool-format": check_tool_format,
    "tools-ignored": check_tools_ignored,
    "system-prompt": check_system_prompt,
    "special-tokens": check_special_tokens,
    "truncation": check_truncation,
    "length": check_length,
    "reasoning": check_reasoning,
    "tool-calls": check_tool_calls,
    "template-drift": check_template_drift,
    "roundtrip": check_roundtrip,
    "duplicates": check_duplicates,
    "repetition": check_repetition,
    "empty-output": check_empty_output,
    "aborted": check_aborted,
    "context-length": check_context_length,
    "lossy-backend": check_lossy_backend,
}

NEEDS_TOKENIZER = {
    "tool-format",
    "tools-ignored",
    "system-prompt",
    "special-tokens",
    "reasoning",
    "tool-calls",
    "roundtrip",
}
NEEDS_MODEL = {"template-drift"}
