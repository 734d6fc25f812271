"""The audit's regression suite (planted bugs, clean controls) and its blind cases.

    .venv/bin/python bench/bench_audit_recall.py [--variants 8] [--speed-samples 100000]

1. Regression suite: every class of `eyas.testing.planted` is planted `--variants` ways into
   the clean toy samples (one audit per class); the clean controls go through one more audit.
   Caught: the share of planted samples the expected check flags with the expected reason.
   The planted corpus names each bug's check where it writes the bug, so a full score shows
   the checks still catch what they were built for, not how well the audit finds bugs it was
   not written against. False positives: the share of clean samples and controls a check
   flags at all, except a warning a control rightly gets (`CONTROL_WARNINGS`: a healthy
   output cut at max_new_tokens is told it was cut, and trains).
2. Blind cases (`audit_blind_cases.py`): broken samples written from descriptions of how data
   goes wrong, naming no check; caught when the audit flags the sample at all. This is the
   recall figure; every miss is listed.
3. The audit's speed on ~100M tokens (`bench_audit.speed`, goal 60 s).

Prints tables and writes JSON (with the command and the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from audit_blind_cases import BLIND_CASES, source_id
from bench_audit import speed

from eyas.audit import AuditOptions, run_audit
from eyas.audit.check import CHECKS
from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.testing.planted import CONTROL_WARNINGS, CONTROLS, PLANTS, World
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample
from eyas.toy.tokenizer import save_tokenizer, train_tokenizer


def _world(tmp: Path) -> World:
    corpus = [str(r) for f in FAMILIES for r in family_rows(f, 30, seed=99)]
    model_dir = save_tokenizer(train_tokenizer(corpus, 800, "kimi"), tmp / "kimi")
    renderer = Renderer(model_dir)
    convs = [
        c
        for f in FAMILIES
        for c in convert_rows(family_rows(f, 12, seed=31), f.format, f.name)
        if hasattr(c, "messages")
    ]
    return World(renderer, convs, [reference_sample(renderer, c) for c in convs])


def _flagged(samples, model_dir: Path, tmp: Path) -> dict[tuple[str, str], set[str]]:
    """(check, reason) -> ids the audit flagged (every id: examples are not capped)."""
    path = tmp / "samples.jsonl"
    path.write_text("\n".join(json.dumps(s.to_dict()) for s in samples) + "\n")
    result = run_audit(path, model_dir, AuditOptions(num_examples=10**9))
    out: dict[tuple[str, str], set[str]] = defaultdict(set)
    for f in result.findings:
        if f.severity in ("error", "warning"):
            out[f.check, f.reason] |= set(f.examples)
    return out


def expected(controls: dict[str, str], sample_id: str) -> set[tuple[str, str]]:
    """The warnings a control is rightly given (none for a clean sample)."""
    return CONTROL_WARNINGS.get(controls.get(sample_id, ""), set())


def recall(variants: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        w = _world(tmp)
        model_dir = Path(w.renderer.model_dir)
        clean_ids = {s.id for s in w.clean}
        per_class, false_pos, clean_seen = {}, defaultdict(set), 0
        for name, plant in PLANTS.items():
            planted = [plant(w, v) for v in range(variants)]
            flagged = _flagged([*w.clean, *(p.sample for p in planted)], model_dir, tmp)
            check, reason = planted[0].check, planted[0].reason
            caught = {p.sample.id for p in planted} & flagged.get((check, reason), set())
            per_class[name] = {
                "check": check,
                "reason": reason,
                "planted": len(planted),
                "caught": len(caught),
                "recall": round(len(caught) / len(planted), 3),
            }
            for (chk, _), ids in flagged.items():
                # The planted check rightly flags a clean partner (the original a duplicate
                # copies); its false positives are counted in the other classes' runs.
                if chk != check:
                    false_pos[chk] |= {f"{name}/{i}" for i in ids & clean_ids}
            clean_seen += len(clean_ids)
        samples = [(c, CONTROLS[c](w, v)) for c in CONTROLS for v in range(variants)]
        controls = {s.id: c for c, s in samples}
        flagged = _flagged([*w.clean, *(s for _, s in samples)], model_dir, tmp)
        negatives = clean_ids | set(controls)
        for (chk, reason), ids in flagged.items():
            # a control's expected warning (a healthy cut output told it was cut) is no FP
            wrong = {i for i in ids & negatives if (chk, reason) not in expected(controls, i)}
            false_pos[chk] |= {f"controls/{i}" for i in wrong}
        clean_seen += len(negatives)
    per_check = {}
    for chk in sorted(CHECKS):
        mine = [c for c in per_class.values() if c["check"] == chk]
        planted = sum(c["planted"] for c in mine)
        per_check[chk] = {
            "classes": len(mine),
            "planted": planted,
            "recall": round(sum(c["caught"] for c in mine) / planted, 3) if planted else None,
            "false_positives": len(false_pos[chk]),
            "fpr": round(len(false_pos[chk]) / clean_seen, 5),
        }
    return {
        "variants": variants,
        "negatives_audited": clean_seen,
        "classes": per_class,
        "checks": per_check,
    }


def blind(variants: int) -> dict:
    """Each blind case `variants` ways, audited beside the clean samples: which checks flag it."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        w = _world(tmp)
        model_dir = Path(w.renderer.model_dir)
        cases = {}
        for case in BLIND_CASES:
            samples = [case.build(w, v) for v in range(variants)]
            sources = {source_id(s.id) for s in samples}
            clean = [s for s in w.clean if s.id not in sources]  # else each is a duplicate
            flagged = _flagged([*clean, *samples], model_dir, tmp)
            by = defaultdict(int)
            caught = set()
            for (chk, reason), ids in flagged.items():
                for s in samples:
                    if s.id in ids:
                        caught.add(s.id)
                        by[f"{chk}/{reason}"] += 1
            cases[case.name] = {
                "what": case.what,
                "samples": len(samples),
                "caught": len(caught),
                "flagged_by": dict(sorted(by.items())),
            }
    samples = sum(c["samples"] for c in cases.values())
    caught = sum(c["caught"] for c in cases.values())
    return {
        "cases": cases,
        "samples": samples,
        "caught": caught,
        "recall": round(caught / samples, 3),
        "missed": sorted(n for n, c in cases.items() if c["caught"] < c["samples"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=8)
    ap.add_argument("--speed-samples", type=int, default=100_000)
    ap.add_argument("--json", default="bench/results/audit_recall.json")
    args = ap.parse_args()
    load_start = os.getloadavg()
    out = {
        "bench": "audit_recall",
        "command": "bench/bench_audit_recall.py " + " ".join(sys.argv[1:]),
        **recall(args.variants),
    }
    print("regression suite: planted bugs, each caught by the check it was planted for")
    print(f"{'check':<22}{'classes':>8}{'planted':>9}{'caught':>8}{'FP':>5}{'FPR':>9}")
    for chk, row in out["checks"].items():
        rec = "-" if row["recall"] is None else f"{row['recall']:.3f}"
        print(
            f"{chk:<22}{row['classes']:>8}{row['planted']:>9}{rec:>8}"
            f"{row['false_positives']:>5}{row['fpr']:>9.5f}"
        )
    missed = {n: c for n, c in out["classes"].items() if c["recall"] < 1}
    print(f"classes planted: {len(out['classes'])}, not fully caught: {sorted(missed) or 'none'}")
    out["blind"] = b = blind(args.variants)
    print("blind cases: written without naming a check; caught = flagged by any check")
    print(f"{'case':<32}{'samples':>8}{'caught':>8}  flagged by")
    for name, c in b["cases"].items():
        flags = ", ".join(f"{k} x{n}" for k, n in c["flagged_by"].items()) or "-"
        print(f"{name:<32}{c['samples']:>8}{c['caught']:>8}  {flags}")
    print(f"blind recall {b['recall']:.3f} ({b['caught']}/{b['samples']}); missed: {b['missed']}")
    if args.speed_samples:
        out["speed"] = speed(args.speed_samples)
        s = out["speed"]
        print(
            f"speed: {s['tokens']:,} tokens in {s['seconds']} s ({s['tokens_per_s']:,} tokens/s; goal {s['goal_seconds']} s)"
        )
    out["load_average"] = {"start": load_start, "end": os.getloadavg()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
