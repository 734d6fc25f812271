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

import orjson

from eyas.audit.data import load_table

SAMPLE_FORMATS = ("specforge", "speculators")


def export_samples(
    input: str | Path, fmt: str, out: str | Path, include_truncated: bool = False
) -> dict:
    if fmt not in SAMPLE_FORMATS:
        raise ValueError(f"format is one of {SAMPLE_FORMATS}")
    table = load_table(input)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written, skipped = 0, {"finish_length": 0, "finish_abort": 0}
    with out.open("wb") as f:
        for i in range(len(table)):
            finish = table.finish_reason[i]
            if finish == "abort" or (finish == "length" and not include_truncated):
                skipped[f"finish_{finish}"] += 1
                continue
            prompt, output = table.prompt.row(i).tolist(), table.output.row(i).tolist()
            mask = [0] * len(prompt) + [int(m) for m in table.supervised(i).tolist()]
            row = {"id": table.ids[i], "input_ids": prompt + output, "loss_mask": mask}
            if fmt == "speculators":
                row["dataset"] = table.dataset[i]
            f.write(orjson.dumps(row) + b"\n")
            written += 1
    return {"written": written, "skipped": skipped, "out": str(out)}
