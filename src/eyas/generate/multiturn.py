"""Multi-turn `all`: regenerate every assistant turn in order (docs/architecture.md).

Turn k is prompted with the source's user and tool messages plus the *regenerated* assistant
turns before it, rendered by the target's own template (which decides what earlier reasoning
looks like). Each generated turn is parsed back into a message by the model format, at its
marker token ids. When a regenerated turn calls different tools than the source did, the
source's tool results no longer answer it: the conversation stops there with
`tool_call_mismatch` instead of splicing mismatched results in.

Storage: when each turn's prompt extends the previous prompt plus its output token for token
(a prefix-stable template), the conversation is one sample, `prompt_ids` = the first prompt,
`output_ids` = everything after it, `loss_mask` = 1 on regenerated tokens. Kimi and Qwen3 are
not prefix-stable, so there each turn becomes its own sample (`id#turn`) with its true prompt:
supervising a turn under a history serving never produces is the "vanishing thought" bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

from eyas.backends.base import Generation, GenRequest
from eyas.records import RequestError, Sample
from eyas.render.renderer import Renderer, answer_turns

if TYPE_CHECKING:
    from eyas.generate.engine import Engine
    from eyas.generate.jobs import Job


@dataclass
class _Turn:
    index: int  # the assistant message regenerated
    request: GenRequest
    generation: Generation
    attempts: int


def _call_names(msg: dict) -> list[str]:
    return [c["function"]["name"] for c in msg.get("tool_calls") or []]


def output_to_message(renderer: Renderer, output_ids: list[int]) -> dict:
    """The assistant message a generated turn makes, parsed at the format's marker ids."""
    parsed = renderer.model_format.parse_output(
        output_ids, renderer.tokenizer, set(renderer.stop_token_ids())
    )
    return parsed.to_message()


def _single_sample(turns: list[_Turn]) -> tuple[list[int], list[int]] | None:
    """(output ids, loss mask) of the whole conversation as one sample when every prompt
    extends the previous prompt and output token for token, else None."""
    stable = all(
        nxt.request.prompt_ids[: len(cur.request.prompt_ids) + len(cur.generation.output_ids)]
        == cur.request.prompt_ids + cur.generation.output_ids
        for cur, nxt in pairwise(turns)
    )
    if len(turns) == 1 or not stable:
        return None
    full = list(turns[0].request.prompt_ids)
    mask: list[int] = []
    for t in turns:
        delta = t.request.prompt_ids[len(full) :]  # user/tool turns between outputs: not trained
        full += delta + t.generation.output_ids
        mask += [0] * len(delta) + [1] * len(t.generation.output_ids)
    return full[len(turns[0].request.prompt_ids) :], mask


def make_multi_turn(base: Renderer):
    by_thinking: dict[bool | None, Renderer] = {base.thinking: base}

    async def regenerate(engine: Engine, job: Job) -> list[Sample]:
        # a dataset may set its own thinking switch: its turns render in that mode
        key = base.thinking if job.thinking is None else job.thinking
        if key not in by_thinking:
            by_thinking[key] = base.with_thinking(key)
        renderer = by_thinking[key]
        messages, _ = renderer.prepare_messages(job.messages)
        # every assistant turn, and the end of a conversation that ends with a question
        assistant_turns = answer_turns(messages)
        history: list[dict] = []
        done: list[_Turn] = []
        cursor = 0
        stopped: tuple[str, str] | None = None
        id_map: dict[str, str] = {}  # source call id -> regenerated call id
        for t in assistant_turns:
            for m in messages[cursor:t]:
                if m["role"] == "tool" and m.get("tool_call_id") in id_map:
                    m = {**m, "tool_call_id": id_map[m["tool_call_id"]]}
                history.append(m)
            cursor = t + 1
            prompt_messages, _ = renderer.prepare_messages(history)
            text = renderer.render_text(prompt_messages, job.tools, add_generation_prompt=True)
            req = GenRequest(
                id=f"{job.id}#{t}",
                prompt_ids=renderer.encode(text),
                max_new_tokens=job.max_new_tokens,
                sampling=job.sampling,
                messages=history,
                tools=job.tools,
            )
            gen, attempts = await engine.request(req)
            done.append(_Turn(t, req, gen, attempts))
            regenerated = output_to_message(renderer, gen.output_ids)
            history.append(regenerated)
            if gen.finish_reason == "length":
                stopped = ("truncated_turn", f"turn {t} hit max_new_tokens")
                break
            source = messages[t] if t < len(messages) else {}
            source_calls = source.get("tool_calls") or []
            for src, new in zip(source_calls, regenerated.get("tool_calls") or []):
                id_map[src["id"]] = new["id"]
            if _call_names(regenerated) != _call_names(source):
                if t != assistant_turns[-1]:
                    stopped = (
                        "tool_call_mismatch",
                        f"turn {t}: regenerated calls {_call_names(regenerated)} vs "
                        f"source {_call_names(messages[t])}",
                    )
                break
        backend = engine.backend_name
        attempts_total = sum(t.attempts for t in done)
        if stopped:
            engine.record_error(
                RequestError(
                    job.id,
                    stopped[0],
                    f"{stopped[1]}; kept {len(done)} of {len(assistant_turns)} turns",
                    attempts_total,
                    job.dataset,
                )
            )
        whole = _single_sample(done)
        if whole is None:
            suffix = len(done) > 1
            return [
                engine.sample_from(
                    job,
                    t.request,
                    t.generation,
                    t.attempts,
                    backend,
                    id=f"{job.id}#{t.index}" if suffix else job.id,
                    turn=t.index,
                    messages=history,
                )
                for t in done
            ]
        output_ids, mask = whole
        return [
            engine.sample_from(
                job,
                done[0].request,
                done[-1].generation,
                attempts_total,
                backend,
                output_ids=output_ids,
                loss_mask=mask,
                turn=-1,
                messages=history,
            )
        ]

    return regenerate
