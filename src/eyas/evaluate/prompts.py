"""Evaluation prompts: the rendered `prompt_ids` of a prepare/render output or of a generate
stage (chat-formatted by the target's own template: raw completions give pathological
acceptance lengths), at most `limit` per dataset."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from eyas.store import load_table, read_rendered


def load_prompts(path: str | Path, limit: int | None = None) -> list[dict]:
    """[{id, dataset, prompt_ids}] in input order."""
    path = Path(path)
    if (path.is_dir() and list(path.glob("part-*.parquet"))) or path.suffix == ".parquet":
        table = load_table(path)
        rows = [
            {
                "id": table.ids[i],
                "dataset": table.dataset[i],
                "prompt_ids": table.prompt.row(i).tolist(),
            }
            for i in range(len(table))
        ]
    else:
        rows = [
            {"id": r["id"], "dataset": r.get("dataset", "default"), "prompt_ids": r["prompt_ids"]}
            for _, r in read_rendered(path)
        ]
    if not limit:
        return rows
    per: dict[str, int] = defaultdict(int)
    kept = []
    for r in rows:
        if per[r["dataset"]] < limit:
            per[r["dataset"]] += 1
            kept.append(r)
    return kept
