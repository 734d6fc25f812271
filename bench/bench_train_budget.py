"""The per-GPU memory and throughput estimate (`eyas.train.budget`) at Kimi-K2.5 width, for
1, 8 and 16 H200s (FSDP2, TTT 7, 16,384 tokens per rank per micro-batch, bf16, the fast path,
the draft head trained), with the drafter's attention MHA (issue 28's drafter) and MLA (the
target's), activation checkpointing off and on; and the threshold `--activation-checkpointing
auto` resolves to (`auto_checkpointing_above`) on an H200 and an 80 GB H100. Arithmetic, not a
measurement: the same estimate `eyas train` prints at start (its memory calibrated on the 2026-12-04 H200 peaks and
on traced ones, its throughput from the MFU measured there).

    .venv/bin/python bench/bench_train_budget.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from eyas.drafter.memory import activation_elements_per_token
from eyas.train.budget import (
    ACTIVATION_FACTOR,
    KIMI_MHA,
    KIMI_MLA,
    MEASURED_MFU,
    Budget,
    auto_checkpointing_above,
    kimi_table,
)

# Device memory as torch reports it (`total_memory`): the H200's from the 2026-12-04 runs' OOM
# messages (bench/results/train_h200_reference.json); an 80 GB H100's as its OOM messages
# commonly read (79.1-79.3 GiB; the lowest taken).
CAPACITY_GIB = {"H200": 139.8, "H100 80GB": 79.1}


def ac_thresholds() -> list[dict]:
    """`auto`'s threshold per device, attention, draft head and GPU count (fast path)."""
    out = []
    for device, gib in CAPACITY_GIB.items():
        for attention in ("mha", "mla"):
            for head_trained in (True, False):
                for world in (1, 8):
                    off = kimi_table(
                        gpus=(world,), checkpointing=False, attention=attention,
                        head_trained=head_trained,
                    )[0]  # fmt: skip
                    out.append(
                        {
                            "device": device, "capacity_gib": gib, "attention": attention,
                            "draft_head": "trained" if head_trained else "frozen",
                            "gpus": world,
                            "ac_off_up_to_tokens": auto_checkpointing_above(
                                Budget(**off), int(gib * 2**30)
                            ),
                        }
                    )  # fmt: skip
    return out


def main() -> None:
    rows = [
        r
        for attention in ("mha", "mla")
        for ac in (False, True)
        for r in kimi_table(checkpointing=ac, attention=attention)
    ]
    print("Kimi-K2.5 drafter, TTT 7, FSDP2, 16,384 tokens per rank (arithmetic, not measured)")
    print(
        f"{'attn':>5}{'AC':>5}{'GPUs':>5}{'trainable GB':>14}{'frozen GB':>11}{'activ. GB':>11}"
        f"{'total GB':>10}{'tokens/s':>10}"
    )
    for r in rows:
        print(
            f"{r['attention']:>5}{'on' if r['activation_checkpointing'] else 'off':>5}"
            f"{r['world']:>5}{r['trainable_gb']:>14}{r['frozen_gb']:>11}"
            f"{r['activations_gb']:>11}{r['total_gb']:>10}{r['tokens_per_s']:>10,}"
        )
    thresholds = ac_thresholds()
    for r in thresholds:
        print(
            f"auto AC on {r['device']}, {r['attention']}, head {r['draft_head']}, "
            f"{r['gpus']} GPU(s): off up to {r['ac_off_up_to_tokens']:,} tokens"
        )
    per_token = {
        f"{name}_ac_{'on' if ac else 'off'}": round(
            ACTIVATION_FACTOR[("fast", name, ac)] * 2 * activation_elements_per_token(shape, 7, ac)
        )
        for name, shape in (("mha", KIMI_MHA), ("mla", KIMI_MLA))
        for ac in (False, True)
    }
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    out = {
        "bench": "train_budget",
        "kind": "arithmetic estimate (eyas.train.budget, eyas.drafter.memory), not a measurement",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "uptime": uptime,
        "load_average": uptime,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "assumptions": {
            "mfu": {"/".join(k): v for k, v in MEASURED_MFU.items()},
            "activations": "eyas.drafter.memory.activation_elements_per_token x 2 B (bf16) x "
            "the fast path's calibration factor",
            "peak_bf16_flops": 989e12,
            "ttt": 7,
            "tokens_per_rank": 16_384,
        },
        "activation_bytes_per_token": per_token,
        "rows": rows,
        "auto_checkpointing": thresholds,
    }
    path = Path("bench/results/train_budget.json")
    path.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
