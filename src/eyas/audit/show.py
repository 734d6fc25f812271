"""`eyas show`: one sample, token by token. Boundaries alternate in shade, special tokens are
bold magenta, prompt tokens are dim, and unsupervised output tokens are struck through."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from eyas.store import SampleTable
from eyas.store.loops import find_loop


def _tokens(
    ids: list[int], tokenizer: Any, special: set[int], base: str, mask: list[int] | None = None
) -> Text:
    text = Text()
    for k, tid in enumerate(ids):
        piece = tokenizer.decode([tid], skip_special_tokens=False)
        style = "bold magenta" if tid in special else base
        style += " on grey15" if k % 2 else " on grey23"
        if mask is not None and not mask[k]:
            style += " strike"
        text.append(piece.replace("\n", "\u21b5\n"), style=style)
    return text


def render_sample(table: SampleTable, i: int, tokenizer: Any) -> Group:
    s = table.sample(i)
    special = set(tokenizer.all_special_ids) | {
        tid
        for tok, tid in tokenizer.get_vocab().items()
        if (tok.startswith(("<|", "[")) and tok.endswith(("|>", "]")))
        or tok in ("<think>", "</think>")
    }
    mask = s.supervised_mask()
    header = (
        f"id {s.id}  dataset {s.dataset}  turn {s.turn}  finish {s.finish_reason} "
        f"(matched {s.matched_stop})  backend {s.backend}  attempts {s.attempts}\n"
        f"prompt {len(s.prompt_ids)} tokens, output {len(s.output_ids)} tokens "
        f"({sum(mask)} supervised)  sampling {s.sampling}"
    )
    loop = find_loop(s.output_ids, drop_last=s.finish_reason == "stop")
    if loop is not None:
        span = tokenizer.decode(loop.span(s.output_ids), skip_special_tokens=False)
        header += (
            f"\nrepetition_loop: {loop.period} tokens x {loop.repeats:.1f} from output token "
            f"{loop.start} (quarantined, never trained): {span!r}"
        )
    return Group(
        Text(header, style="bold"),
        Panel(_tokens(s.prompt_ids, tokenizer, special, "dim"), title="prompt (not trained)"),
        Panel(_tokens(s.output_ids, tokenizer, special, "", mask), title="output (trained)"),
    )
