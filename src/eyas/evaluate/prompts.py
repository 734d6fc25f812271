"""Evaluation prompts: the rendered `prompt_ids` of a prepare/render output or of a generate
stage (chat-formatted by the target's own template: raw completions give pathological
acceptance lengths), at most `limit` conversations per dataset.

Every turn the model answers is a prompt, on the history it answers: a rendered row is
prompted at its answer turn (`eyas.render.renderer.answer_turn`), and a conversation whose
later turns follow the model's own answers (MT-Bench's second question, BFCL's turns) gets
those later prompts from `follow_up_prompts`, on the target's own answers. A generate-stage
sample that holds a whole regenerated conversation (`loss_mask`) gives one prompt per
regenerated turn, each on the regenerated history before it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from eyas.store import load_table, read_rendered


def _turn_prompts(table, i: int) -> list[dict]:
    """One prompt per supervised run of a multi-turn sample: prompt_ids + the output before it."""
    prompt = table.prompt.row(i).tolist()
    if not table.loss_mask.present(i):
        return [{"id": table.ids[i], "dataset": table.dataset[i], "prompt_ids": prompt}]
    output = table.output.row(i).tolist()
    mask = table.loss_mask.row(i).tolist()
    starts = [j for j, m in enumerate(mask) if m and (j == 0 or not mask[j - 1])]
    return [
        {
            "id": table.ids[i] if k == 0 else f"{table.ids[i]}@{s}",
            "dataset": table.dataset[i],
            "prompt_ids": prompt + output[:s],
        }
        for k, s in enumerate(starts)
    ]


def load_prompts(path: str | Path, limit: int | None = None) -> list[dict]:
    """[{id, dataset, prompt_ids, (messages, tools, turn)}] in input order."""
    path = Path(path)
    if (path.is_dir() and list(path.glob("part-*.parquet"))) or path.suffix == ".parquet":
        table = load_table(path)
        groups = [_turn_prompts(table, i) for i in range(len(table))]
    else:
        groups = [
            [
                {
                    "id": r["id"],
                    "dataset": r.get("dataset", "default"),
                    "prompt_ids": r["prompt_ids"],
                    "messages": r.get("messages") or [],
                    "tools": r.get("tools") or [],
                    "turn": r.get("turn", -1),
                }
            ]
            for _, r in read_rendered(path)
        ]
    per: dict[str, int] = defaultdict(int)
    kept = []
    for group in groups:
        name = group[0]["dataset"]
        if not limit or per[name] < limit:
            per[name] += 1
            kept.extend(group)
    return kept


Answer = Callable[[list[int]], list[int]]  # prompt ids -> the target's own output ids


def follow_up_prompts(prompts: list[dict], renderer, answer: Answer) -> tuple[list[dict], dict]:
    """The prompts of the turns after each row's answer turn that the source leaves to the
    model (`is_unanswered`, and the final question): each on the target's own answers before
    it, rendered by the target's template. Returns (prompts, {reason: conversations stopped}):
    an answer that calls a tool ends its conversation (`tool_results_unavailable`: the source
    has no results for it), one cut by max_new_tokens too (`truncated_turn`)."""
    from eyas.generate.multiturn import output_to_message
    from eyas.render.renderer import answer_turns, is_unanswered

    out: list[dict] = []
    stopped: dict[str, int] = defaultdict(int)
    stop_ids = set(renderer.stop_token_ids())
    for p in prompts:
        messages, _ = renderer.prepare_messages(p.get("messages") or [])
        if not any(is_unanswered(m) for m in messages):
            continue
        turn = p.get("turn", -1)
        later = [t for t in answer_turns(messages) if turn >= 0 and t > turn]
        prompt_ids, history = p["prompt_ids"], messages[:turn]
        cursor = turn
        for t in later:
            output = answer(prompt_ids)
            reply = output_to_message(renderer, output)
            if reply.get("tool_calls"):
                stopped["tool_results_unavailable"] += 1
                break
            if not output or output[-1] not in stop_ids:
                stopped["truncated_turn"] += 1
                break
            history = [*history, reply, *messages[cursor + 1 : t]]
            cursor = t
            prepared, _ = renderer.prepare_messages(history)
            text = renderer.render_text(prepared, p.get("tools"), add_generation_prompt=True)
            prompt_ids = renderer.encode(text)
            out.append({**p, "id": f"{p['id']}#{t}", "prompt_ids": prompt_ids, "turn": t})
    return out, dict(stopped)
