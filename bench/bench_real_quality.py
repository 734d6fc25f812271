"""Drafters of a real model trained to their plateau: learning curves of served acceptance on
SmolLM2-135M-Instruct, eyas's methods against speculators 0.9.0, through eyas's own stages
and real engines.

    .venv/bin/python bench/bench_real_quality.py --workdir DIR [--arms eagle3,speculators] \\
        [--json bench/results/real_quality.json] [--tiny]

Runs for hours: start it under `nohup` from a worktree whose code will not change; it writes
its results file after every point and resumes where it stopped when run again with the same
`--workdir` (a point whose training finished is not trained again; a segment cut by a kill is
trained again from the last checkpoint, its lost time not counted).

1. prompts (bench/real_prompts.py, tools/prompt_data.sh): ShareGPT, HumanEval and BFCL for
   training, a disjoint held-out set (ShareGPT, HumanEval, BFCL, MT-Bench) for evaluation,
   each prompt with its category; converted and rendered with the target's template;
2. `eyas generate --backend vllm` (greedy, exact ids, at most `--max-new-tokens`), `eyas audit`
   (its quarantine honoured downstream), `eyas capture --backend vllm` (the EAGLE-3 layers;
   DFlash's own layers captured again when a DFlash arm runs);
3. each arm a learning curve: trained from the captured states in segments ending at the
   schedule's steps; after each segment the drafter is exported (`eyas export drafter
   --format vllm`; speculators saves its own layout) and served in vLLM on CPU on the held-out
   prompts (`eyas eval --backend vllm`, chain K = 3, greedy, lossless check and speedup
   against the same vLLM without a drafter). A point records the steps, the training wall time
   (the optimizer steps; setup and exports apart), process CPU time, the load average, and the
   acceptance length overall, per category and per drafted position. A curve ends when two
   successive points differ by under `--plateau` (from `--min-plateau-steps` on), or at its
   step or training-time cap. Arms take turns point by point, `--interleave` at a time in the
   order given (the next joins when one ends): each gets early points, and the machine's load
   falls on the arms compared alike.
   The learning rate is linear warmup then constant (`min_lr_ratio` 1): every step's rate is
   the same however far the curve goes, so a point is the same run whether or not later
   points follow.
4. arms: speculators' `Eagle3DraftModel` gets exactly the batches its matched eyas arm trains
   (bench/real_pipeline.py `export_captured_batches`), the same draft vocabulary, TTT depth,
   AdamW, clipping and learning rate at every step, and is served in the same vLLM. Decision
   arms (`group: decision`) run to a fixed step count (`--decision-steps`) and compare at equal
   steps and equal training time.

Adding an arm: an `Arm` in `ARMS` (its `train` dict overrides TrainConfig, a new method is
`method=...`), named in `--arms`; rerun the same command on the same workdir: finished arms
are kept, the new one runs. An arm's definition is recorded with its points: one changed since (another method,
`train` setting or peer) is recorded `not_run` (`definition_changed`), its points untouched. An
arm whose option this commit's TrainConfig lacks (`eagle3`
before the method options were nested) is recorded `not_run` with the reason and tried again by a later
run from a newer commit, as is one whose served eval failed (`eval_failed`). Each point
records the commit it ran on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from bench_local_generate import smollm2_dir
from peers import commit, vllm_python
from real_pipeline import (
    capture,
    cli,
    export_captured_batches,
    finished,
    generate,
    peer_train,
    served,
)
from real_prompts import build

from eyas.train.checkpoint import latest_checkpoint
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer

SCHEDULE = (10, 25, 50, 100, 150, 200, 300, 400, 500, 600, 800, 1000, 1200, 1500, 2000, 2500, 3000)
TINY_SCHEDULE = (2,)


@dataclass
class Arm:
    """One learning curve. `train` overrides eyas's TrainConfig defaults (the matched arm's,
    for speculators); `peer_of` names the eyas arm whose batches and settings speculators
    gets."""

    name: str
    group: str  # main | decision
    method: str = "eagle3"
    train: dict = field(default_factory=dict)
    peer_of: str | None = None
    note: str = ""


ARMS = [
    # the whole vocabulary, asked for by size (SmolLM2's 49,152): the default for a small target
    # until the curves below changed it; its checkpoints must resume with the vocabulary they
    # were trained with, whatever the default is now
    Arm(
        "eagle3",
        "main",
        train={"draft_vocab": 49152},
        note="the whole draft vocabulary (49,152: SmolLM2's)",
    ),
    Arm("speculators", "main", peer_of="eagle3", note="speculators 0.9.0, eagle3's batches"),
    # a reduced draft vocabulary trains ~10x faster on CPU (measured): a whole curve, with its
    # own speculators peer, so the goal can be read at a plateau as well
    # at most 16,384: the 6,593 tokens the data supervise, what eyas's default rule now picks
    Arm("eagle3-vocab16k", "main", train={"draft_vocab": 16384}, note="16k draft vocabulary"),
    Arm("speculators-vocab16k", "main", peer_of="eagle3-vocab16k", note="eagle3-vocab16k's"),
    # speculators freezes its draft head (the target's rows); at equal steps it led the trained
    # head early on: the same choice on eyas's side, a whole curve
    Arm(
        "eagle3-vocab16k-head-frozen",
        "main",
        train={"draft_vocab": 16384, "eagle3": {"draft_head": "frozen"}},
        note="16k draft vocabulary, draft head frozen (speculators' choice)",
    ),
    # speculators' drafter differs from eyas's default in its residual too (norm before it):
    # that choice on eyas's side, a whole curve
    Arm(
        "eagle3-vocab16k-norm-before-residual",
        "main",
        train={"draft_vocab": 16384, "eagle3": {"norm_before_residual": True}},
        note="16k draft vocabulary, residual from hidden_norm (speculators' default)",
    ),
    Arm("eagle3.1", "main", method="eagle3.1"),
    Arm("dflash", "main", method="dflash"),
    # decision arms: one choice away from eagle3-vocab16k (the draft head's is the main arm
    # eagle3-vocab16k-head-frozen)
    Arm(
        "eagle3-ttt3",
        "decision",
        train={"draft_vocab": 16384, "ttt": 3},
        note="TTT depth 3 instead of 7",
    ),
    Arm(
        "eagle3-lr3e-4",
        "decision",
        train={"draft_vocab": 16384, "lr": 3e-4},
        note="learning rate 3e-4",
    ),
]
ARM_NAMES = {a.name: a for a in ARMS}


def data_fingerprint(cap: Path) -> str:
    """sha256 of the captured samples' ids, token ids and loss masks, in id order: what a
    drafter trains on besides the hidden states (whose floats depend on the machine)."""
    import hashlib

    import numpy as np

    from eyas.store.captures import capture_shards, read_shard_offsets, read_shard_tokens

    rows: dict[str, tuple[bytes, bytes]] = {}
    for shard in capture_shards(cap):
        offs = read_shard_offsets(shard)
        ids, mask = read_shard_tokens(shard)
        for i, sid in enumerate(offs.ids):
            key = sid.decode() if isinstance(sid, bytes) else str(sid)
            lo, hi = int(offs.offsets[i]), int(offs.offsets[i + 1])
            rows.setdefault(
                key,
                (
                    np.ascontiguousarray(ids[lo:hi], dtype=np.int32).tobytes(),
                    np.ascontiguousarray(mask[lo:hi], dtype=np.int8).tobytes(),
                ),
            )
    h = hashlib.sha256()
    for key in sorted(rows):
        tok, msk = rows[key]
        h.update(key.encode() + b"\0" + tok + msk)
    return h.hexdigest()


def servable(drafter: Path, vocab: int, target_vocab: int) -> str:
    """vLLM 0.32 refuses a speculators-format EAGLE-3 export whose draft vocabulary is the
    target's whole one when it carries `d2t`: `llama_eagle3.py` creates
    `draft_id_to_target_id` only when the sizes differ (`__init__`) and `load_weights` renames
    `d2t` to it, so there is no parameter to load it into. speculators' `save_pretrained`
    always writes `d2t`/`t2d`, and so does eyas's export until issue 35's fix. For a whole
    vocabulary both are the identity: they are dropped here (what the fix does), nothing else
    changes, and the point records it (`served_as`)."""
    if vocab != target_vocab:
        return "as exported"
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    dropped = False
    for path in drafter.glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            if not {"d2t", "t2d"} & set(f.keys()):
                continue
        weights = load_file(str(path))
        save_file({k: v for k, v in weights.items() if k not in ("d2t", "t2d")}, str(path))
        dropped = True
    return "identity d2t/t2d dropped (whole vocabulary)" if dropped else "as exported"


def supported(arm: Arm) -> str | None:
    """Why this eyas cannot run the arm (a TrainConfig option it does not have), else None."""
    missing = [k for k in arm.train if k not in TrainConfig.model_fields]
    return f"TrainConfig has no {', '.join(missing)} on this commit" if missing else None


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.work: Path = args.workdir
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = self.work / "bench.log"
        self.model = smollm2_dir()
        self.out = Path(args.json)
        self.started = time.perf_counter()
        self.stack = contextlib.ExitStack()  # the baseline server, stopped on the way out
        self._baseline: str | None = None
        old = json.loads(self.out.read_text()) if self.out.exists() and not args.fresh else {}
        if old.get("workdir") not in (None, str(self.work)):
            old = {}  # another run's file: start a new one
        self.results = old or {
            "bench": "real_quality",
            "date": time.strftime("%Y-%m-%d"),
            "load_average": {"start": list(os.getloadavg())},
            "arms": {},
        }

    def say(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def write(self) -> None:
        a = self.args
        self.results.update(
            {
                "command": " ".join(["bench/bench_real_quality.py", *sys.argv[1:]]),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
                "device": "cpu",
                "torch_threads": a.threads,
                "updated": time.strftime("%Y-%m-%d %H:%M:%S"),
                "workdir": str(self.work),
                "settings": {
                    k: str(v) if isinstance(v, Path) else v
                    for k, v in vars(a).items()
                    if k not in ("fresh",)
                },
                "schedule": {
                    "steps": list(self.schedule()),
                    "plateau": f"two successive points differ by under {a.plateau:.0%} of the "
                    f"earlier one, from step {a.min_plateau_steps} on",
                    "caps": {
                        "main_steps": a.max_steps,
                        "main_train_seconds": a.max_train_s,
                        "decision_steps": a.decision_steps,
                    },
                    "lr": "linear warmup, then constant (min_lr_ratio 1): independent of where "
                    "a curve stops",
                },
            }
        )
        self.results["load_average"]["end"] = list(os.getloadavg())
        tmp = self.out.with_suffix(".json.tmp")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(self.results, indent=1) + "\n")
        tmp.replace(self.out)

    def schedule(self) -> tuple[int, ...]:
        return TINY_SCHEDULE if self.args.tiny else SCHEDULE

    # -- data -------------------------------------------------------------------------------

    def data(self) -> None:
        a = self.args
        sizes = self.sizes()
        self.say("prompts: building or reusing the split")
        split = build(self.model, self.work / "data", sizes["train"], sizes["heldout"], a.seed)
        self.train_prep, self.heldout = Path(split["train_prepare"]), Path(split["heldout_prepare"])
        gen, cap = self.work / "generate", self.work / "capture-eagle3"
        seconds = self.results.setdefault("data", {}).setdefault("seconds", {})
        before = set(seconds) if finished(gen) and finished(cap) else set()
        if not finished(gen):
            self.say("generating through vLLM")
            t = generate(
                self.model, self.train_prep, gen, a.max_new_tokens, self.log,
                "--no-adaptive-concurrency", "--concurrency", a.generate_concurrency,
            )  # fmt: skip
            seconds.update({k: round(v, 1) for k, v in t.items()})
        audit = self.work / "audit.json"
        if not audit.exists():
            self.say("auditing")
            t0 = time.perf_counter()
            # 1: systemic findings, 3: checks skipped; both recorded, the quarantine is written
            cli("audit", gen, "--model", self.model, "--json", audit, log=self.log, ok=(0, 1, 3))
            seconds["audit"] = round(time.perf_counter() - t0, 1)
        if not finished(cap):
            self.say("capturing through vLLM (EAGLE-3 layers)")
            seconds["capture_eagle3"] = round(capture(self.model, gen, cap, self.log), 1)
        self.gen, self.caps = gen, {"eagle3": cap}
        self.check_data(cap, rebuilt=bool(seconds.keys() - before))
        manifest = json.loads((gen / "manifest.json").read_text())
        audit_json = json.loads(audit.read_text())
        self.results["data"].update(
            {
                "split": split,
                "generate": {
                    k: manifest.get(k) for k in ("counts", "complete", "this_run", "totals")
                },
                "audit": {
                    k: audit_json.get(k)
                    for k in ("verdict", "samples", "quarantined", "counts", "datasets")
                    if k in audit_json
                },
                "captured": json.loads((cap / "manifest.json").read_text()).get("counts"),
            }
        )
        self.write()

    def check_data(self, cap: Path, rebuilt: bool) -> None:
        """Record the captured data's fingerprint; refuse to add points to curves made on other
        data. A rebuild (a new machine, the workdir gone) regenerates the same prompts greedily,
        and vLLM's ids can still differ: the fingerprint says whether they did."""
        data = self.results["data"]
        fp = data_fingerprint(cap)
        known = data.get("fingerprint")
        if known and known != fp and any(r["points"] for r in self.results["arms"].values()):
            raise SystemExit(
                f"the captured data in {cap} are not those the curves in {self.out} were "
                f"trained on (fingerprint {fp[:12]} against {known[:12]}): start a new results "
                "file (--json) or pass --fresh"
            )
        if rebuilt or not known:
            counts = json.loads((cap / "manifest.json").read_text()).get("counts")
            before = data.get("captured")  # the build before's counts (no fingerprint then)
            data.setdefault("builds", []).append(
                {
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "machine": platform.node(),
                    "fingerprint": fp,
                    "matches_before": None if not known else known == fp,
                    "captured": counts,
                    "captured_before": before,
                }
            )
        data["fingerprint"] = fp

    def sizes(self) -> dict:
        if self.args.tiny:
            return {
                "train": {"sharegpt": 6, "humaneval": 2, "bfcl": 2},
                "heldout": {"sharegpt": 1, "humaneval": 1, "bfcl": 1, "mt_bench_math": 1},
            }
        a = self.args
        return {
            "train": {"sharegpt": a.train_chat, "humaneval": a.train_code, "bfcl": a.train_tools},
            "heldout": {
                "sharegpt": a.heldout,
                "humaneval": a.heldout,
                "bfcl": a.heldout,
                "mt_bench": a.heldout,
                "mt_bench_math": a.heldout,
            },
        }

    def capture_for(self, method: str) -> Path:
        """The capture a method trains from: DFlash fuses other layers than EAGLE-3."""
        key = "dflash" if method == "dflash" else "eagle3"
        if key not in self.caps:
            cap = self.work / f"capture-{key}"
            if not finished(cap):
                self.say(f"capturing through vLLM ({key} layers)")
                t = capture(self.model, self.gen, cap, self.log, method=method)
                self.results["data"]["seconds"][f"capture_{key}"] = round(t, 1)
            self.caps[key] = cap
        return self.caps[key]

    # -- training ---------------------------------------------------------------------------

    def train_cfg(self, arm: Arm, out: Path, steps: int) -> TrainConfig:
        a = self.args
        base = ARM_NAMES[arm.peer_of] if arm.peer_of else arm
        kw = {
            "batch_tokens": a.batch_tokens,
            "lr": a.lr,
            "warmup_steps": a.warmup_steps,
            **base.train,
        }
        return TrainConfig(
            target=self.model,
            hidden_states=self.capture_for(base.method),
            out=out,
            method=base.method,
            steps=steps,
            min_lr_ratio=1.0,  # constant after warmup: see the module docstring
            checkpoint_every=10**9,  # only at the end of each segment (steps == cfg.steps)
            keep_last=2,
            log_to=["none"],
            **kw,
        )

    def eyas_segment(self, arm: Arm, arm_dir: Path, to_step: int) -> dict:
        """Train ARM to `to_step` (resuming its last checkpoint) and export it for vLLM."""
        cfg = self.train_cfg(arm, arm_dir / "train", to_step)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        trainer = Trainer(cfg, log=lambda s: None)
        trainer.setup()
        first = trainer.step
        setup_s = time.perf_counter() - wall0
        history = trainer.train()
        trainer.finish()
        trainer.cleanup()
        cpu = time.process_time() - cpu0
        wall = time.perf_counter() - wall0
        export = arm_dir / "export"
        shutil.rmtree(export, ignore_errors=True)
        cli(
            "export", "drafter", "--checkpoint", cfg.out, "--format", "vllm", "--out", export,
            log=self.log,
        )  # fmt: skip
        vocab = int(getattr(trainer.raw_model.config, "draft_vocab_size", 0) or 0)  # DFlash: none
        served_as = servable(export, vocab, int(trainer.target.vocab_size))
        last = history[-1] if history else None
        if first >= to_step:  # a kill after the checkpoint, before the segment was recorded
            self.say(f"{arm.name}: step {to_step} was trained before a kill; its time is lost")
        return {
            "from_step": first,
            "to_step": to_step,
            "step_seconds": round(last.elapsed_s if last else 0.0, 2),
            "segment_seconds": round(wall, 2),
            "setup_seconds": round(setup_s, 2),
            "cpu_seconds": round(cpu, 2),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "loss": last.loss if last else None,
            "train_acc": last.per_step_acc if last else None,
            "supervised_tokens": sum(m.trained_positions for m in history),
            "draft_vocab_size": vocab,
            "served_as": served_as,
            "drafter": str(export),
        }

    def peer_segment(self, arm: Arm, arm_dir: Path, from_step: int, to_step: int) -> dict:
        """speculators on the matched eyas arm's batches of steps [from_step, to_step)."""
        cfg = self.train_cfg(arm, arm_dir / "exporter", to_step)  # never trains: batches only
        wall0 = time.perf_counter()
        exporter = Trainer(cfg, log=lambda s: None)
        exporter.setup()
        batches, meta = arm_dir / "batches.safetensors", arm_dir / "batches.json"
        factors = [exporter._lr_factor(s) for s in range(from_step, to_step)]
        export_captured_batches(exporter, range(from_step, to_step), batches, meta, factors)
        vocab = int(exporter.raw_model.config.draft_vocab_size)
        target_vocab = int(exporter.target.vocab_size)
        exporter.cleanup()
        del exporter
        state, new_state = arm_dir / f"state-{from_step}.safetensors", arm_dir / "state.tmp"
        for old in arm_dir.glob("state-*.safetensors"):  # the last two are kept
            if int(old.stem.split("-")[1]) < from_step:
                old.unlink()
        extra = ["--state-out", str(new_state)]
        if from_step:
            extra += ["--resume", str(state)]
        drafter = arm_dir / "drafter"
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = peer_train(self.model, batches, meta, cfg.ttt, drafter, 0, *extra)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        new_state.replace(arm_dir / f"state-{to_step}.safetensors")
        batches.unlink()
        served_as = servable(drafter, vocab, target_vocab)
        return {
            "from_step": from_step,
            "to_step": to_step,
            "step_seconds": round(sum(out["step_seconds"]), 2),
            "segment_seconds": round(time.perf_counter() - wall0, 2),
            "cpu_seconds": round((ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime), 2),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "loss": out["losses"][-1] if out["losses"] else None,
            "draft_vocab_size": vocab,
            "trainable_parameters": out["trainable_parameters"],
            "served_as": served_as,
            "drafter": str(drafter),
        }

    # -- evaluation -------------------------------------------------------------------------

    def baseline_url(self) -> str:
        """One server of the target without a drafter for the whole run, started as `eyas
        eval` starts its own baseline (`evaluate.served.engine_servers`, the same flags): every
        point's lossless check (two runs) and speedup use it, and no point pays its start."""
        if self._baseline is None:
            from eyas.evaluate.config import EvalConfig
            from eyas.evaluate.served import engine_servers

            cfg = EvalConfig(
                target=self.model, drafter=self.model, input=self.heldout, backend="vllm",
                engine={"python": str(vllm_python())}, json_out=self.work / "baseline" / "eval.json",
            )  # fmt: skip
            hook = engine_servers(cfg, self.work, drafter=False, log=self.say)
            self._baseline = self.stack.enter_context(hook)[0]
        return self._baseline

    def evaluate(self, drafter: Path, out: Path) -> dict:
        a = self.args
        t0 = time.perf_counter()
        r = served(
            self.model, Path(drafter), ["--input", self.heldout], out, self.log,
            "--k", a.k, "--max-new-tokens", a.eval_max_new_tokens, "--baseline",
            "--baseline-url", self.baseline_url(),
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        datasets = r["datasets"]
        return {
            "eval_seconds": round(seconds, 1),
            "acceptance_length": r["acceptance_length"],
            "per_position": r["per_position"],
            "acceptance_rate_per_position": r["acceptance_rate_per_position"],
            "verify_steps": r["verify_steps"],
            "categories": {
                c: {
                    k: f[k]
                    for k in (
                        "acceptance_length",
                        "per_position",
                        "acceptance_rate_per_position",
                        "verify_steps",
                        "prompts",
                        "datasets",
                    )
                }
                for c, f in r["categories"].items()
            },
            "datasets": {
                n: {k: d.get(k) for k in ("acceptance_length", "per_position", "prompts")}
                for n, d in datasets.items()
            },
            "lossless": r["lossless"],
            "throughput": r.get("throughput"),
            "prompts": r["settings"]["prompts"],
            "eval_json": str(out),
        }

    # -- curves -----------------------------------------------------------------------------

    def curve(self, arm: Arm) -> Iterator[None]:
        """ARM's learning curve, one point per `next()` (the run interleaves arms)."""
        a = self.args
        rec = self.results["arms"].setdefault(
            arm.name, {**asdict(arm), "commit": commit(), "points": [], "status": "running"}
        )
        cap_steps = a.decision_steps if arm.group == "decision" else a.max_steps
        if rec["status"] not in ("running", "not_run", "eval_failed") and not self.raised(
            rec, cap_steps
        ):
            self.say(f"{arm.name}: {rec['status']} already")
            return
        why = supported(arm) if not arm.peer_of else supported(ARM_NAMES[arm.peer_of])
        why = why or self.redefined(arm, rec)
        if why:
            rec.update(status="not_run", reason=why)
            self.write()
            self.say(f"{arm.name}: not run ({why})")
            return
        rec["status"] = "running"
        rec.pop("reason", None)
        rec.setdefault("commits", [])
        if commit() not in rec["commits"]:
            rec["commits"].append(commit())
        arm_dir = self.work / "arms" / arm.name
        arm_dir.mkdir(parents=True, exist_ok=True)
        lost = self.state_lost(arm, arm_dir, rec["points"])
        if lost:  # the curve cannot go on as one run: its points are kept, it starts again
            rec.setdefault("lost_runs", []).append(
                {"reason": lost, "points": rec["points"], "commits": rec["commits"]}
            )
            rec["points"], rec["commits"] = [], [commit()]
            for stale in [
                *arm_dir.glob("segment-*.json"),
                *arm_dir.glob("state-*.safetensors"),
                *arm_dir.glob("eval-*.json"),
            ]:
                stale.unlink()  # a segment of the lost run is not one of the new run's
            shutil.rmtree(arm_dir / "train", ignore_errors=True)  # nor an older checkpoint
            self.write()
            self.say(
                f"{arm.name}: {lost}; its {len(rec['lost_runs'][-1]['points'])} points "
                "are kept under lost_runs and the curve starts again"
            )
        steps = [s for s in self.schedule() if s <= cap_steps] or [cap_steps]
        for to_step in steps:
            points = rec["points"]
            if points and points[-1]["steps"] >= to_step:
                continue
            from_step = points[-1]["steps"] if points else 0
            seg_file = arm_dir / f"segment-{to_step}.json"
            if seg_file.exists():  # trained before a kill; only the evaluation is missing
                seg = json.loads(seg_file.read_text())
            else:
                self.say(f"{arm.name}: training steps {from_step}..{to_step}")
                seg = (
                    self.peer_segment(arm, arm_dir, from_step, to_step)
                    if arm.peer_of
                    else self.eyas_segment(arm, arm_dir, to_step)
                )
                seg_file.write_text(json.dumps(seg) + "\n")
            self.say(f"{arm.name}: serving the step-{to_step} drafter in vLLM")
            try:
                ev = self.evaluate(Path(seg["drafter"]), arm_dir / f"eval-{to_step}.json")
            except SystemExit as exc:  # the arm stops; a later run retries this point
                rec.update(status="eval_failed", reason=str(exc))
                self.write()
                self.say(f"{arm.name}: evaluation failed ({exc}); the next arm goes on")
                return
            before = points[-1] if points else {}
            point = {
                "steps": to_step,
                "train_seconds": round(before.get("train_seconds", 0.0) + seg["step_seconds"], 1),
                "train_wall_seconds": round(
                    before.get("train_wall_seconds", 0.0) + seg["segment_seconds"], 1
                ),
                "cpu_seconds": round(before.get("cpu_seconds", 0.0) + seg["cpu_seconds"], 1),
                "segment": seg,
                **ev,
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "commit": commit(),
            }
            points.append(point)
            self.say(
                f"{arm.name}: step {to_step}: acceptance length {ev['acceptance_length']} "
                f"(lossless {ev['lossless']}), per position {ev['per_position']}, "
                f"{point['train_seconds']} s of training"
            )
            stop = self.stop_reason(arm, points, cap_steps)
            if stop:
                rec["status"] = stop
                self.write()
                break
            self.write()
            yield
        else:
            rec["status"] = "step_cap" if arm.group == "main" else "done"
        self.write()

    @staticmethod
    def redefined(arm: Arm, rec: dict) -> str | None:
        """An arm whose points were trained under another definition (its method, its `train`
        settings, its peer) is not the same curve: its points would be labelled with settings
        they were not trained with. It is not run; a new definition needs a new arm name."""
        now = asdict(arm)
        changed = [k for k in ("method", "train", "peer_of") if rec.get(k) != now[k]]
        if not (changed and rec["points"]):
            return None
        said = "; ".join(f"{k} {rec.get(k)!r} in the results, {now[k]!r} here" for k in changed)
        return f"definition_changed: {said} (name the new definition a new arm)"

    def state_lost(self, arm: Arm, arm_dir: Path, points: list[dict]) -> str | None:
        """Why the curve's last point cannot be trained on from here (a stable reason), else
        None. The workdir lives on one machine: a results file carried to another (a fresh
        clone, a new machine) names points whose checkpoint or optimizer state is not there.
        Training on from step 0 would count those steps twice."""
        if not points:
            return None
        last = points[-1]["steps"]
        if arm.peer_of:
            have = (arm_dir / f"state-{last}.safetensors").exists()
        else:
            ckpt = latest_checkpoint(arm_dir / "train" / "checkpoints")
            have = ckpt is not None and int(ckpt.name.removeprefix("step-")) >= last
        return None if have else "state_missing"

    def raised(self, rec: dict, cap_steps: int) -> bool:
        """A curve stopped at a cap that this run's settings raise goes on (the learning rate
        is constant after warmup, so its later points are those of one longer run), as does
        one whose plateau was called before this run's `--min-plateau-steps`."""
        last = rec["points"][-1] if rec["points"] else None
        if last is not None and rec["status"] == "plateau":
            return last["steps"] < self.args.min_plateau_steps
        if last is None or rec["status"] not in ("step_cap", "time_cap", "done"):
            return False
        more_steps = any(last["steps"] < s <= cap_steps for s in self.schedule())
        return more_steps and (
            rec["status"] != "time_cap" or last["train_seconds"] < self.args.max_train_s
        )

    def stop_reason(self, arm: Arm, points: list[dict], cap_steps: int) -> str | None:
        a = self.args
        last = points[-1]
        if arm.group == "decision":
            return "done" if last["steps"] >= cap_steps else None
        if len(points) >= 2 and last["steps"] >= a.min_plateau_steps:
            prev = points[-2]["acceptance_length"]
            if prev and abs(last["acceptance_length"] - prev) / prev < a.plateau:
                return "plateau"
        if last["steps"] >= cap_steps:
            return "step_cap"
        if last["train_seconds"] >= a.max_train_s:
            return "time_cap"
        return None

    def run(self) -> None:
        with self.stack:
            self._run()

    def _run(self) -> None:
        self.data()
        names = [n for n in self.args.arms.split(",") if n]
        for name in names:
            if name not in ARM_NAMES:
                raise SystemExit(f"unknown arm {name!r}; known: {', '.join(ARM_NAMES)}")
        # `--interleave` arms at a time take turns point by point (the next in the list joins
        # when one ends): early points for each, and the machine's load falls on them alike
        pending = [self.curve(ARM_NAMES[n]) for n in names]
        active: list[Iterator[None]] = []
        while pending or active:
            while pending and len(active) < self.args.interleave:
                active.append(pending.pop(0))
            for curve in list(active):
                if next(curve, StopIteration) is StopIteration:
                    active.remove(curve)
        self.say(f"done; {self.out}")


# PLATEAU_FROM: why `--min-plateau-steps` is 500. Up to step 500 the schedule's points are
# 25-100 steps apart, and one curve trained twice from step 0 on the same data (on two
# machines: speculators-vocab16k, results file 2026-12-05) measured 1.1801 and 1.1684 at step
# 100: the held-out evaluation resolves about 1%. Between points 50 steps apart a drafter still
# gaining 3% per 100 steps can then show under 2%: eagle3-vocab16k-head-frozen "plateaued" at
# step 150 (+1.7% over step 100) where the trained head gained 2.8% per 50 steps. From step
# 500 on the points are 100-500 steps apart.

# the sizes and settings, one `--flag default help` a line (results record every one)
NUMBERS = """
--seed 0 the split's seed
--train-chat 600 ShareGPT training prompts
--train-code 148 HumanEval training prompts
--train-tools 300 BFCL training prompts
--heldout 6 held-out prompts per dataset
--max-new-tokens 64 regenerated tokens
--generate-concurrency 128 generate's requests in flight
--batch-tokens 1024 tokens per optimizer step
--lr 1e-4 peak learning rate (eyas's default)
--warmup-steps 20 linear warmup (eyas's default)
--max-steps 3000 main arms' step cap
--max-train-s 5400.0 main arms' training-time cap
--decision-steps 50 decision arms' steps
--plateau 0.02 relative change between two points that ends a curve
--min-plateau-steps 500 no plateau before this step (see PLATEAU_FROM)
--k 3 drafts per verify step (chain)
--eval-max-new-tokens 48 new tokens per held-out prompt
--interleave 2 arms taking turns point by point
"""


def number(text: str) -> int | float:
    return float(text) if any(c in text for c in ".e") else int(text)


class Killed(BaseException):
    """SIGTERM: the run stops (not an evaluation failure an arm could survive)."""


def killed(*_) -> None:
    raise Killed("SIGTERM")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--json", default="bench/results/real_quality.json")
    ap.add_argument("--arms", default=",".join(a.name for a in ARMS), help="in this order")
    ap.add_argument("--tiny", action="store_true", help="smoke: a few prompts, 2 steps, 1 point")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing results file")
    for line in NUMBERS.strip().splitlines():
        flag, default, what = line.split(" ", 2)
        ap.add_argument(flag, type=type(number(default)), default=number(default), help=what)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (eyas and the peer)")
    args = ap.parse_args()
    if args.tiny:
        args.max_new_tokens, args.eval_max_new_tokens = 16, 16
        args.batch_tokens, args.warmup_steps, args.max_steps, args.decision_steps = 512, 1, 2, 2
        args.min_plateau_steps = 10**9
    torch.set_num_threads(args.threads)
    # a kill (SIGTERM) unwinds: the stage running stops cleanly (real_pipeline.cli) and the
    # vLLM servers started here are stopped on the way out
    signal.signal(signal.SIGTERM, killed)
    try:
        Bench(args).run()
    except Killed:
        print("stopped (SIGTERM): rerun the same command to resume", flush=True)
        sys.exit(143)


if __name__ == "__main__":
    main()
