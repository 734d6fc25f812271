"""Multi-turn `all`: regenerate every assistant turn in order (design.md §7).

Turn k is prompted with the source's user and tool messages plus the *regenerated* assistant
turns before it, rendered by the target's own template (which decides what earlier reasoning
looks like). When a regenerated turn calls different tools than the source did, the source's
tool results no longer answer it: the conversation stops there with `tool_call_mismatch`
instead of splicing mismatched results in (anchors.md #6).

Storage: when each turn's prompt extends the previous prompt plus its output token for token
(a prefix-stable template), the conversation is one sample, `prompt_ids` = the first prompt,
`output_ids` = everything after it, `loss_mask` = 1 on regenerated tokens. Kimi and Qwen3 are
not prefix-stable (formats.md §2.11), so there each turn becomes its own sample
(`id#turn`) with its true prompt: supervising a turn under a history serving never produces is
the "vanishing thought" bug (anchors.md #8).
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING, Any

from eyas.backends.base import GenRequest
from eyas.records import RequestError, Sample
from eyas.render.renderer import Renderer

if TYPE_CHECKING:
    from eyas.generate.engine import Engine, Job


def output_to_message(renderer: Renderer, output_ids: list[int]) -> dict[str, Any]:
    """An assistant message parsed from generated ids at the profile's marker tokens."""
    if renderer.profile.tool_parser == "kimi_k2":
        from eyas.tools.parse import parse_kimi_output

        parsed = parse_kimi_output(output_ids, renderer.tokenizer, set(renderer.stop_token_ids()))
        msg: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.reasoning:
            msg["reasoning_content"] = parsed.reasoning
        if parsed.calls:
            msg["tool_calls"] = [
                {
                    "id": c.raw_id,
                    "type": "function",
                    "function": {"name": c.name or c.raw_id, "arguments": c.arguments},
                }
                for c in parsed.calls
            ]
        return msg
    stops = set(renderer.stop_token_ids())
    body = [t for t in output_ids if t not in stops]
    return {
        "role": "assistant",
        "content": renderer.tokenizer.decode(body, skip_special_tokens=True),
    }


def _call_names(msg: dict) -> list[str]:
    return [c["function"]["name"] for c in msg.get("tool_calls") or []]


def make_multi_turn(renderer: Renderer):
    async def regenerate(engine: Engine, job: Job) -> list[Sample]:
        messages, _ = renderer.prepare_messages(job.messages)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        history: list[dict] = []
        pieces: list[tuple[int, GenRequest, Any, int]] = []
        cursor = 0
        stopped = None
        id_map: dict[str, str] = {}  # source call id -> regenerated call id
        for t in turns:
            for m in messages[cursor:t]:
                if m["role"] == "tool" and m.get("tool_call_id") in id_map:
                    m = {**m, "tool_call_id": id_map[m["tool_call_id"]]}
                history.append(m)
            cursor = t + 1
            prompt_messages, _ = renderer.prepare_messages(history)
            text = renderer.render_text(prompt_messages, job.tools, add_generation_prompt=True)
            req = GenRequest(
                f"{job.id}#{t}",
                renderer.encode(text),
                job.max_new_tokens,
                job.sampling,
                history,
                job.tools,
            )
            gen, attempts = await engine.request(req)
            pieces.append((t, req, gen, attempts))
            regenerated = output_to_message(renderer, gen.output_ids)
            history.append(regenerated)
            if gen.finish_reason == "length":
                stopped = ("truncated_turn", f"turn {t} hit max_new_tokens")
                break
            source_calls = messages[t].get("tool_calls") or []
            for src, new in zip(source_calls, regenerated.get("tool_calls") or []):
                id_map[src["id"]] = new["id"]
            if _call_names(regenerated) != _call_names(messages[t]):
                if t != turns[-1]:
                    stopped = (
                        "tool_call_mismatch",
                        f"turn {t}: regenerated calls {_call_names(regenerated)} vs "
                        f"source {_call_names(messages[t])}",
                    )
                break
        conversation = history
        backend = engine.servers[0].backend.name
        prefix_ok = all(
            nxt[1].prompt_ids[: len(cur[1].prompt_ids) + len(cur[2].output_ids)]
            == cur[1].prompt_ids + cur[2].output_ids
            for cur, nxt in pairwise(pieces)
        )
        if stopped:
            engine.record_error(
                RequestError(
                    job.id,
                    stopped[0],
                    f"{stopped[1]}; kept {len(pieces)} of {len(turns)} turns",
                    sum(p[3] for p in pieces),
                    job.dataset,
                )
            )
        if len(pieces) == 1 or not prefix_ok:
            suffix = len(pieces) > 1
            return [
                engine.sample_from(
                    job,
                    req,
                    gen,
                    attempts,
                    backend,
                    id=f"{job.id}#{t}" if suffix else job.id,
                    turn=t,
                    messages=conversation,
                )
                for t, req, gen, attempts in pieces
            ]
        first = pieces[0][1].prompt_ids
        full = list(first)
        mask: list[int] = []
        for _, req, gen, _ in pieces:
            delta = req.prompt_ids[len(full) :]  # user/tool turns between outputs: not trained
            full += delta + gen.output_ids
            mask += [0] * len(delta) + [1] * len(gen.output_ids)
        last = pieces[-1]
        return [
            engine.sample_from(
                job,
                pieces[0][1],
                last[2],
                sum(p[3] for p in pieces),
                backend,
                output_ids=full[len(first) :],
                loss_mask=mask,
                turn=-1,
                messages=conversation,
            )
        ]

    return regenerate
