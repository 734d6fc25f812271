"""`eyas eval`: acceptance length per dataset by lossless speculative decoding.

    eyas eval --target MODEL_DIR --drafter runs/x/drafter --input runs/x/prepare --k 3 \\
        [--temperature 0] [--max-new-tokens 256] [--limit 50] [--json eval.json]

Prompts are the rendered `prompt_ids` (chat-formatted by the target's own template;
anchors.md #57), from a prepare/render output or a generate stage. At temperature 0 every
output is compared with target-only greedy decoding; any mismatch makes `lossless` false.
Settings (K, chain, temperature, batch size 1) are reported with every number (anchors.md #56).
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import torch

from eyas import __version__
from eyas.evaluate.metrics import acceptance_metrics
from eyas.evaluate.speculative import greedy_reference, speculative_decode
from eyas.hf_models import load_frozen_lm
from eyas.train.checkpoint import load_drafter


def load_prompts(path: str | Path, limit: int | None = None) -> list[dict]:
    """(id, dataset, prompt_ids) from rendered JSONL / a prepare dir / a generate stage."""
    path = Path(path)
    rows: list[dict] = []
    if (path.is_dir() and list(path.glob("part-*.parquet"))) or path.suffix == ".parquet":
        from eyas.audit.data import load_table

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
        from eyas.generate.run import rendered_files

        for file in rendered_files(path):
            for line in file.read_bytes().splitlines():
                if line.strip():
                    r = orjson.loads(line)
                    rows.append(
                        {"id": r["id"], "dataset": r["dataset"], "prompt_ids": r["prompt_ids"]}
                    )
    if limit:
        per: dict[str, int] = defaultdict(int)
        kept = []
        for r in rows:
            if per[r["dataset"]] < limit:
                per[r["dataset"]] += 1
                kept.append(r)
        rows = kept
    return rows


def run_eval(
    target_dir: str | Path,
    drafter_dir: str | Path,
    input: str | Path,
    k: int = 3,
    temperature: float = 0.0,
    max_new_tokens: int = 256,
    limit: int | None = None,
    seed: int = 0,
    progress=None,
) -> dict[str, Any]:
    from eyas.render.renderer import Renderer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = load_frozen_lm(target_dir, device, torch.float32)
    drafter = load_drafter(drafter_dir, device).eval()
    aux = drafter.config.aux_layer_ids
    stop = set(Renderer(target_dir).stop_token_ids())
    prompts = load_prompts(input, limit)
    gen = torch.Generator(device=device).manual_seed(seed)
    per_ds: dict[str, dict[str, list]] = defaultdict(lambda: {"accepted": [], "produced": []})
    mismatches: list[str] = []
    start = time.time()
    for n, p in enumerate(prompts):
        res = speculative_decode(
            target, drafter, p["prompt_ids"], k, max_new_tokens, stop, aux, temperature, gen
        )
        per_ds[p["dataset"]]["accepted"] += res.accepted
        per_ds[p["dataset"]]["produced"] += res.produced
        if temperature == 0 and res.tokens != greedy_reference(
            target, p["prompt_ids"], max_new_tokens, stop
        ):
            mismatches.append(p["id"])
        if progress:
            progress(n + 1, len(prompts))
    all_acc = [a for d in per_ds.values() for a in d["accepted"]]
    all_prod = [x for d in per_ds.values() for x in d["produced"]]
    return {
        **acceptance_metrics(all_acc, all_prod, k),
        "lossless": not mismatches if temperature == 0 else None,
        "lossless_mismatches": mismatches,
        "datasets": {
            name: {
                **acceptance_metrics(d["accepted"], d["produced"], k),
                "prompts": sum(1 for p in prompts if p["dataset"] == name),
            }
            for name, d in sorted(per_ds.items())
        },
        "settings": {
            "k": k,
            "decoding": "chain",
            "topk": 1,
            "temperature": temperature,
            "batch_size": 1,
            "max_new_tokens": max_new_tokens,
            "prompts": len(prompts),
            "metric": "acceptance_length = tokens per target verify step, bonus "
            "included (SGLang definition; prefill token excluded)",
        },
        "target": str(target_dir),
        "drafter": str(drafter_dir),
        "eyas_version": __version__,
        "seconds": round(time.time() - start, 2),
    }
