"""Evaluation prompts: the rendered `prompt_ids` of a prepare/render output or of a generate
stage (chat-formatted by the target's own template: raw completions give pathological
acceptance lengths), at most `limit` conversations per dataset.

Every turn the model answers is a prompt, on the history it answers: a rendered row is
prompted at its answer turn (`eyas.render.renderer.answer_turn`), and a conversation whose
later turns follow the model's own answers (MT-Bench's second question, BFCL's turns) gets
those later prompts from `follow_up_prompts`, round by round (`Rounds`), on the evaluated
run's own answers (at temperature 0 the target's greedy answers). A generate-stage
sample that holds a whole regenerated conversation (`loss_mask`) gives one prompt per
regenerated turn, each on the regenerated history before it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
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


def follow_up_prompts(
    prompts: list[dict], outputs: Mapping[str, list[int]], renderer
) -> tuple[list[dict], dict[str, int]]:
    """The next round's prompts: for each prompt of this round whose conversation goes on (a
    row with a turn the source leaves to the model, `is_unanswered`, or a follow-up itself),
    the next answer turn, asked after this prompt's own output (`outputs[id]`) and rendered by
    the target's template. A follow-up's `messages` are the conversation with the answers it
    was asked after in place, `follows` names the prompt it follows.

    Returns (prompts, {reason: conversations stopped}): an answer that calls a tool ends its
    conversation (`tool_results_unavailable`: the source has no results for it), one cut by
    max_new_tokens too (`truncated_turn`), and so does a request that failed for good
    (`earlier_turn_failed`: there is no answer to ask after)."""
    from eyas.generate.multiturn import output_to_message
    from eyas.render.renderer import answer_turns, is_unanswered

    out: list[dict] = []
    stopped: dict[str, int] = defaultdict(int)
    stop_ids = set(renderer.stop_token_ids())
    for p in prompts:
        messages, _ = renderer.prepare_messages(p.get("messages") or [])
        if "follows" not in p and not any(is_unanswered(m) for m in messages):
            continue  # a row the source answers: its one prompt is the whole evaluation
        turn = p.get("turn", -1)
        t = next((t for t in answer_turns(messages) if turn >= 0 and t > turn), None)
        if t is None:
            continue  # the conversation's last answer turn
        output = outputs.get(p["id"])
        if output is None:
            stopped["earlier_turn_failed"] += 1
            continue
        reply = output_to_message(renderer, output)
        if reply.get("tool_calls"):
            stopped["tool_results_unavailable"] += 1
            continue
        if not output or output[-1] not in stop_ids:
            stopped["truncated_turn"] += 1
            continue
        filled = [*messages[:turn], reply, *messages[turn + 1 :]]
        prepared, _ = renderer.prepare_messages(filled[:t])
        text = renderer.render_text(prepared, p.get("tools"), add_generation_prompt=True)
        conversation = p.get("conversation", p["id"])
        out.append(
            {
                **p,
                "id": f"{conversation}#{t}",
                "prompt_ids": renderer.encode(text),
                "messages": filled,
                "turn": t,
                "conversation": conversation,
                "follows": p["id"],
            }
        )
    return out, dict(stopped)


FollowUps = Callable[[list[dict], Mapping[str, list[int]]], list[dict]]
"""This round's prompts and the outputs so far (prompt id -> output ids) -> the next round's."""


class Rounds:
    """The prompts of an evaluation, round by round: iterating yields each round's prompts;
    the next round is built by `follow_ups` once every prompt of this one has its output in
    `outputs` (the evaluator writes them there), until a round is empty. At temperature 0 a
    lossless run's outputs are the target's greedy answers, so later turns are asked after
    exactly those; above it, after the run's own samples.

    `history` keeps every round's prompts (a baseline run replays them: `replay`)."""

    def __init__(self, first: list[dict], follow_ups: FollowUps | None = None) -> None:
        self.first, self.follow_ups = first, follow_ups
        self.outputs: dict[str, list[int]] = {}
        self.history: list[list[dict]] = []

    def __iter__(self) -> Iterator[list[dict]]:
        pending = self.first
        while pending:
            self.history.append(pending)
            yield pending
            pending = self.follow_ups(pending, self.outputs) if self.follow_ups else []

    @property
    def prompts(self) -> list[dict]:
        """Every prompt evaluated so far, in order."""
        return [p for r in self.history for p in r]

    @property
    def sizes(self) -> list[int]:
        return [len(r) for r in self.history]

    def replay(self) -> Rounds:
        """The same rounds again, for a run that must answer the same prompts (a baseline)."""
        later = iter(self.history[1:])
        return Rounds(self.history[0] if self.history else [], lambda *_: next(later, []))
