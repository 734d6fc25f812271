"""Hand eyas samples to other trainers with ids and loss masks intact.

- `specforge`: the pre-tokenized JSONL SpecForge reads through `data.prompts_path`:
  `{"input_ids": [...], "loss_mask": [...]}` (equal lengths, binary mask) plus `id`.
- `speculators`: JSONL rows with `input_ids` and `loss_mask`, which speculators' data
  preparation passes straight through, plus `id`.

In both, `input_ids = prompt_ids + output_ids` and `loss_mask` is 0 over the prompt and the
sample's supervision over the output: nothing is re-tokenized.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import orjson

from eyas.export.config import SampleFormat
from eyas.store import load_table, quarantined_ids, select_trainable

SAMPLE_FORMATS = get_args(SampleFormat)


def export_samples(
    input: str | Path,
    fmt: str,
    out: str | Path,
    truncated: str = "train",
    quarantine: str | Path | None = None,
    include_quarantined: bool = False,
) -> dict:
    """Write the samples that would train (the store's one rule, quarantine honoured)."""
    if fmt not in SAMPLE_FORMATS:
        raise ValueError(f"format is one of {SAMPLE_FORMATS}")
    table = load_table(input)
    quarantined, quarantine_file = quarantined_ids(input, quarantine, include_quarantined)
    keep, skipped = select_trainable(table, truncated, quarantined)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        for i in keep:
            prompt, output = table.prompt.row(i).tolist(), table.output.row(i).tolist()
            mask = [0] * len(prompt) + table.supervised(i).astype(int).tolist()
            row = {"id": table.ids[i], "input_ids": prompt + output, "loss_mask": mask}
            if fmt == "speculators":
                row["dataset"] = table.dataset[i]
            f.write(orjson.dumps(row) + b"\n")
    return {
        "written": len(keep),
        "skipped": dict(skipped),
        "quarantine": str(quarantine_file) if quarantine_file else None,
        "out": str(out),
    }
