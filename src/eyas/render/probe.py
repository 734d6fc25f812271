"""Probe a chat template with dummy conversations before rendering a dataset (docs/architecture.md).

Like TRL's `is_chat_template_prefix_preserving`: eyas's correctness rests on a template it
does not control, so it observes what the template does and records it in the manifest.
"""

from __future__ import annotations

from typing import Any

from eyas.errors import RefusedError
from eyas.render.renderer import Renderer

_USER = "PROBE_USER_7f3a"
_SYSTEM = "PROBE_SYSTEM_7f3a"
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_lookup_7f3a",
        "description": "Look up a probe value",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The key"}},
            "required": ["key"],
        },
    },
}


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class TemplateProbeError(RefusedError):
    """The template cannot be used (for example it ignores tools); `reason` is stable."""


def _declaration_style(renderer: Renderer, with_tools: str, without: str) -> tuple[str, str]:
    """('typescript'|'json'|'other', the declaration the tools added)."""
    fmt = renderer.model_format
    body = fmt.declaration_body(fmt.split_turns(with_tools))
    if body is None:  # the format cannot find its own declaration: take what the tools added
        prefix = with_tools[: _common_prefix_len(with_tools, without)]
        body = with_tools[len(prefix) :]
        if without and with_tools.endswith(without[len(prefix) :]):
            body = with_tools[len(prefix) : len(with_tools) - len(without) + len(prefix)]
    if "namespace functions" in body and "type probe_lookup_7f3a" in body:
        return "typescript", body
    if '"name":"probe_lookup_7f3a"' in body.replace(" ", ""):
        return "json", body
    return "other", body


def probe_template(renderer: Renderer) -> dict[str, Any]:
    """Render dummy conversations and report what the template does."""
    user = [{"role": "user", "content": _USER}]
    plain = renderer.render_text(user, None, add_generation_prompt=True)
    with_tools = renderer.render_text(user, [PROBE_TOOL], add_generation_prompt=True)
    tools_native = with_tools != plain and "probe_lookup_7f3a" in with_tools
    style, declaration = (
        _declaration_style(renderer, with_tools, plain) if tools_native else ("ignored", "")
    )
    # The declaration must be the form this model family was trained on.
    expected = renderer.model_format.declaration_prefix
    declaration_ok = tools_native and (expected is None or expected in with_tools)

    # Default system prompt: the text that stands where the source's system prompt would,
    # when no system message is given (a prompt opening such as a BOS is common to both).
    with_system = renderer.render_text(
        [{"role": "system", "content": _SYSTEM}, *user], None, add_generation_prompt=True
    )
    a = plain[: plain.index(_USER)]
    b = with_system[: with_system.index(_USER)]
    head = _common_prefix_len(a, b)
    tail = _common_prefix_len(a[head:][::-1], b[head:][::-1])
    injected = a[head : len(a) - tail]
    system_kept = _SYSTEM in with_system

    no_gen = renderer.render_text(user, None, add_generation_prompt=False)
    suffix = plain[len(no_gen) :] if plain.startswith(no_gen) else None

    # Prefix stability: does a finished exchange render as a prefix of a longer conversation?
    # Two shapes, since templates drop reasoning by different rules: a plain answer followed by
    # a new user turn (Qwen3), and a tool round followed by a final answer (Kimi's split).
    call = {
        "id": "functions.probe_lookup_7f3a:0",
        "type": "function",
        "function": {"name": "probe_lookup_7f3a", "arguments": '{"key": "k"}'},
    }
    answer = {"role": "assistant", "content": "PROBE_ANSWER", "reasoning_content": "PROBE_THOUGHT"}
    cases = [
        ([*user, answer], [{"role": "user", "content": "PROBE_NEXT"}], None),
        (
            [
                *user,
                {**answer, "content": "", "tool_calls": [call]},
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": "probe_lookup_7f3a",
                    "content": "PROBE_RESULT",
                },
            ],
            [answer, {"role": "user", "content": "PROBE_NEXT"}],
            [PROBE_TOOL],
        ),
    ]
    stable = True
    for short, more, tools in cases:
        short_msgs, _ = renderer.prepare_messages(short)
        long_msgs, _ = renderer.prepare_messages(short + more)
        short_text = renderer.render_text(short_msgs, tools, add_generation_prompt=False)
        long_text = renderer.render_text(long_msgs, tools, add_generation_prompt=False)
        stable = stable and long_text.startswith(short_text)

    result: dict[str, Any] = {
        "tools_rendered": tools_native,
        "declaration_style": style,
        "declaration_matches_profile": declaration_ok,
        "declaration_head": declaration[:120],
        "default_system_injected": bool(injected),
        "default_system_text": injected,
        "source_system_kept": system_kept,
        "generation_suffix": suffix,
        "prefix_stable": stable,
    }
    key = renderer.model_format.thinking_key
    if key:
        on = renderer.render_text(user, None, add_generation_prompt=True, **{key: True})
        off = renderer.render_text(user, None, add_generation_prompt=True, **{key: False})
        result["thinking_switch"] = {"key": key, "changes_prompt": on != off}
    return result


TOOLS_IGNORED = (
    "the chat template does not render `tools`: a prompt without its tools would teach the "
    "model to answer tool requests blind"
)


def require_native_tools(probe: dict[str, Any], renderer: Renderer) -> None:
    """Raise when tools are present but the template ignores them or declares them wrongly."""
    if not probe["tools_rendered"]:
        raise TemplateProbeError("tools_ignored", f"{TOOLS_IGNORED}; refusing to render")
    if not probe["declaration_matches_profile"]:
        raise TemplateProbeError(
            "wrong_tool_declaration",
            f"profile {renderer.model_format.name} expects a declaration starting "
            f"{renderer.model_format.declaration_prefix!r}; template produced "
            f"{probe['declaration_head']!r}",
        )
