"""Helpers of the `real` tier (importable: pytest puts tests/real/ on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from typer.testing import CliRunner

from eyas.cli import app
from eyas.sources.run import convert_file
from eyas.toy.datasets import FAMILIES, family_rows

CHAT = ("b5_ultrachat", "b6_math", "b7_code")
ROWS, SEED, MAX_NEW = 4, 3, 128


def source_rows(root: Path, name: str, rows: int = ROWS, seed: int = SEED) -> Path:
    fam = next(f for f in FAMILIES if f.name == name)
    path = root / f"{name}.src.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in family_rows(fam, rows, seed=seed)) + "\n")
    return path


def converted(root: Path, name: str, rows: int = ROWS, seed: int = SEED) -> Path:
    fam = next(f for f in FAMILIES if f.name == name)
    out = root / f"{name}.jsonl"
    convert_file(source_rows(root, name, rows, seed), out, fam.format, name)
    return out


def hf_greedy(model, prompt_ids: list[int], stop: list[int], max_new: int) -> list[int]:
    """transformers' own greedy decoding, one unpadded prompt at a time: the reference."""
    out = model.generate(
        torch.tensor([prompt_ids]),
        attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
        max_new_tokens=max_new,
        do_sample=False,
        eos_token_id=stop,
        pad_token_id=stop[0],
    )
    return out[0, len(prompt_ids) :].tolist()


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])
