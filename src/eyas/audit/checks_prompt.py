"""Checks of how prompts were rendered. They decode prompts, so they look at an evenly spread
sample of each dataset (`--sample`; every sample with `--sample all`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from eyas.audit.check import Check, Hit, Systemic, register
from eyas.audit.context import AuditContext


@register
class ToolFormat(Check):
    """Tool definitions or calls written as text in a foreign format, or a native declaration
    in the wrong form. Only places a definition or call can be pasted are read (system and
    user turns, assistant history): tool results and JSON payloads are legitimate text."""

    name = "tool-format"
    needs = frozenset({"tokenizer"})
    sampled = True
    reasons = {
        "glaive_text": "Glaive tool definitions or calls written as text in the prompt",
        "hermes_text": "Hermes <tools>/<tool_call> text in the prompt instead of native tools",
        "json_schema_text": "tool definitions pasted into the prompt as JSON instead of declared "
        "natively",
        "xlam_types_text": "xLAM tool definitions (Python type names) pasted into the prompt",
        "json_declaration": "the tool declaration is JSON, not the TypeScript the model was "
        "trained on",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        fmt = ctx.model_format
        for i in ctx.sample_of(idx):
            i = int(i)
            turns = ctx.turns(i)
            for kind in fmt.foreign_tool_text(turns):
                yield Hit(i, "error", f"{kind}_text")
            if fmt.declaration_style == "typescript":
                body = fmt.declaration_body(turns)
                if body is not None and body.lstrip()[:1] in ("[", "{"):
                    yield Hit(i, "error", "json_declaration")


@register
class ToolsIgnored(Check):
    name = "tools-ignored"
    needs = frozenset({"tokenizer"})
    sampled = True
    reasons = {
        "tools_not_declared": "the conversation has tools but the prompt declares none",
        "template_ignores_tools": "the model's chat template does not render tools at all",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit | Systemic]:
        # Only rows that carry tools are judged: most models have no tools in their template,
        # and a chat dataset without tool rows is not wrong for it.
        with_tools = np.asarray([i for i in idx if _carries_tools(ctx, int(i))], dtype=np.int64)
        if not len(with_tools):
            return
        if ctx.probe is not None and not ctx.probe.get("tools_rendered", True):
            yield Systemic(
                "error",
                "template_ignores_tools",
                self.reasons["template_ignores_tools"],
                count=len(with_tools),
                total=len(idx),
            )
        for i in ctx.sample_of(with_tools):
            i = int(i)
            tools = ctx.table.tools(i)
            if not ctx.model_format.declares_tools(ctx.turns(i), tools):
                yield Hit(i, "error", "tools_not_declared")


def _carries_tools(ctx: AuditContext, i: int) -> bool:
    """Does sample `i` carry tool definitions? Judged on the raw JSON where there is one, so
    a dataset of 100k chat rows is not parsed for it."""
    raw = ctx.table.tools_json[i]
    if isinstance(raw, (str, bytes)):
        return raw.strip() not in ("", "[]", "null", b"", b"[]", b"null")
    return bool(ctx.table.tools(i))


@register
class SystemPrompt(Check):
    name = "system-prompt"
    needs = frozenset({"tokenizer"})
    sampled = True
    reasons = {
        "source_system_missing": "the source system prompt is missing from the rendered prompt",
        "default_system_added": "the template's default system prompt was injected although "
        "the source had its own",
        "default_system_injected": "no source system prompt; the template injected its default",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        default = ctx.default_system_body()
        fmt = ctx.model_format
        for i in ctx.sample_of(idx):
            i = int(i)
            msgs = ctx.table.messages(i)
            source = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else None
            turns = ctx.turns(i)
            bodies = fmt.system_bodies(turns) or [ctx.prompt_text(i)]
            has_default = default is not None and any(default in b for b in bodies)
            if isinstance(source, str) and source.strip():
                if not any(source.strip() in b for b in bodies):
                    yield Hit(i, "error", "source_system_missing")
                if has_default and default not in source:
                    yield Hit(i, "warning", "default_system_added")
            elif has_default:
                yield Hit(i, "info", "default_system_injected")


@register
class UserTurn(Check):
    """A prompt with no user turn: the model is asked to answer nobody (a ShareGPT row that
    starts with the assistant, a system-only conversation). Judged from the source messages;
    samples that carry none are judged from their decoded prompt (sampled)."""

    name = "user-turn"
    reasons = {"no_user_turn": "the prompt has no user turn"}

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit]:
        bare = []
        for i in idx:
            i = int(i)
            history = ctx.history(i)
            if not history:
                bare.append(i)
            elif not any(m.get("role") == "user" for m in history):
                yield Hit(i, "error", "no_user_turn")
        if bare and ctx.tokenizer is not None:
            fmt = ctx.model_format
            for i in ctx.sample_of(np.asarray(bare)):
                turns = ctx.turns(int(i))
                if len(turns) > 1 and not fmt.user_bodies(turns):
                    yield Hit(int(i), "error", "no_user_turn")


def _text_fields(msg: dict) -> Iterator[str]:
    for key in ("content", "reasoning_content"):
        value = msg.get(key)
        if isinstance(value, str):
            yield value
        elif isinstance(value, list):
            yield from (p.get("text", "") for p in value if isinstance(p, dict))


@register
class SpecialTokens(Check):
    """Control tokens must be single tokens, must stay single tokens in the data, and must
    never come from message text: a user who writes `<|im_end|>` gets the real control token
    from Kimi's tokenizer, which ends the turn inside the prompt."""

    name = "special-tokens"
    needs = frozenset({"tokenizer"})
    sampled = True
    reasons = {
        "marker_not_single_token": "control tokens that do not encode to one token",
        "split_marker": "control-token text present as several ordinary tokens (re-tokenized "
        "text?)",
        "control_token_in_content": "a message's text contains a control token of the model",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit | Systemic]:
        fmt = ctx.model_format
        broken = [m for m in fmt.markers if len(ctx.encode(m)) != 1]
        if broken:
            yield Systemic(
                "error",
                "marker_not_single_token",
                f"{self.reasons['marker_not_single_token']}: {broken}",
                len(broken),
                len(fmt.markers),
            )
        markers = [m for m in (*fmt.markers, *fmt.stop_tokens) if m in ctx.marker_ids]
        for i in idx:  # messages are cheap: every sample
            i = int(i)
            texts = [t for m in ctx.table.messages(i) for t in _text_fields(m)]
            if any(mk in t for t in texts for mk in markers):
                yield Hit(i, "error", "control_token_in_content")
        for i in ctx.sample_of(idx):
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
                    yield Hit(i, "error", "split_marker")
                    break


@register
class TemplateDrift(Check):
    """Prompts must be what the model's own template renders today."""

    name = "template-drift"
    needs = frozenset({"renderer"})
    sampled = True
    reasons = {
        "fingerprint_mismatch": "the data was rendered with another tokenizer or template",
        "prompt_differs": "prompt_ids differ from a fresh render with the model's template",
    }

    def run(self, ctx: AuditContext, dataset: str, idx: np.ndarray) -> Iterator[Hit | Systemic]:
        render = ctx.table.manifest.get("render") or {}
        for key, mine in (
            ("tokenizer_sha256", ctx.renderer.fingerprint),
            ("template_sha256", ctx.renderer.template_sha256),
        ):
            if render.get(key) and render[key] != mine:
                yield Systemic(
                    "error",
                    "fingerprint_mismatch",
                    f"the data was rendered with {key} {render[key][:12]}…, the model has "
                    f"{mine[:12]}…",
                    len(idx),
                    len(idx),
                )
        t = ctx.table
        n = min(ctx.options.decode_limit or len(idx), 400)
        picked = idx[np.linspace(0, len(idx) - 1, min(n, len(idx))).astype(np.int64)]
        for i in picked:
            i = int(i)
            # multi-turn samples with a loss mask hold several prompts: not one render
            if int(t.turn[i]) < 0 and t.loss_mask.present(i):
                continue
            history = ctx.history(i)
            if not history:
                continue
            try:
                prepared, _ = ctx.renderer.prepare_messages(history)
                ids = ctx.renderer.encode(ctx.renderer.render_text(prepared, t.tools(i)))
            except Exception:
                yield Hit(i, "error", "prompt_differs")
                continue
            if ids != t.prompt.row(i).tolist():
                yield Hit(i, "error", "prompt_differs")
