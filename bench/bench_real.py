"""eyas against vLLM speculators' `Eagle3` drafter on a real pretrained target: the same
regenerated data, the same stored target states, the same optimizer steps and schedule, both
served in the same vLLM and measured on the benchmarks model cards report.

    .venv/bin/python bench/bench_real.py [--train-rows 60] [--steps 150] \
        [--bench mt_bench,humaneval] [--bench-limit 10] [--heldout] [--threads 2] \
        [--no-peer] [--workdir DIR]

Target: HF's SmolLM2-135M-Instruct (tools/smollm2.sh; 30 layers, hidden 576, vocab 49152),
fp32 on CPU. Stages, each timed:
1. data: the toy chat datasets (B4 ShareGPT, B5 UltraChat, B6 math, B7 code, B8 reasoning)
   rendered with SmolLM2's template and regenerated greedily through vLLM on CPU
   (`eyas generate --backend vllm`);
2. capture: `eyas capture --backend vllm` (the aux layers and the last layer, fp32);
3. training, `--steps` optimizer steps on the same batches of the same captured states:
   - eyas from the captures (`eyas train --hidden-states`: the drafter that is served);
   - speculators 0.9.0 `Eagle3DraftModel` (one llama layer, sdpa, eager KL loss, decay 0.8;
     its model-level training on CPU, bench/peer_speculators_train.py in its own venv) on
     exactly the batches eyas trained, read from the same capture and packed as speculators
     packs them, with eyas's draft vocabulary, AdamW, clipping and learning-rate schedule;
   - eyas online (the 30-layer target in process) for `--online-steps` steps, timed only:
     online versus from-capture training speed;
4. serving: each drafter inside vLLM (`eyas eval --bench ... --backend vllm --baseline`,
   chain k = 3, the published configuration: SGLang steps 3, topk 1, 4 draft tokens):
   acceptance length per benchmark (tokens per verify step, bonus included; MT-Bench's second
   turn asked after the served model's own first answer), lossless against the same vLLM
   without a drafter, and the served speedup over it. `--heldout` adds the held-out toy chat
   prompts (other seeds, no training conversation among them) as one more row.

Threads: `--threads` sets torch's threads here and in the peer (default 2, this machine's
cores); vLLM runs with its own default on the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_local_generate import smollm2_dir
from bench_train import timed
from real_pipeline import capture, cli, export_captured_batches, generate, peer_train, served

from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer

CHAT = ("b4_sharegpt", "b5_ultrachat", "b6_math", "b7_code", "b8_reasoning")
TRAIN_SEED, HELDOUT_SEED = 21, 77


def prepare(model: Path, root: Path, rows: int, seed: int, skip: set[str]) -> tuple[Path, int]:
    """Convert and render the chat datasets into a prepare dir; conversations in `skip`
    (ids are content hashes) are left out, so held-out prompts never train."""
    renderer = Renderer(model)
    prep = root / "prepare"
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for name in CHAT:
        fam = next(f for f in FAMILIES if f.name == name)
        src, conv = root / f"{name}.src.jsonl", root / f"{name}.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, rows, seed=seed)) + "\n")
        convert_file(src, conv, fam.format, name)
        kept = [x for x in conv.read_text().splitlines() if json.loads(x)["id"] not in skip]
        conv.write_text("".join(x + "\n" for x in kept))
        n += render_file(renderer, conv, prep / "rendered" / f"{name}.jsonl").num_rendered
    return prep, n


def conversation_ids(prep: Path) -> set[str]:
    return {
        json.loads(x)["id"]
        for f in (prep / "rendered").glob("*.jsonl")
        if not f.name.endswith((".errors.jsonl", ".manifest.json"))
        for x in f.read_text().splitlines()
    }


def train_cfg(args, model: Path, out: Path, steps: int, **kw) -> TrainConfig:
    return TrainConfig(
        target=model,
        out=out,
        steps=steps,
        ttt=args.ttt,
        draft_vocab=args.draft_vocab,
        batch_tokens=args.batch_tokens,
        lr=args.lr,
        warmup_steps=args.warmup_steps,
        checkpoint_every=10**6,
        **kw,
    )


def peer_train_all(args, model: Path, captured: Trainer, work: Path) -> dict:
    batches, meta = work / "peer_batches.safetensors", work / "peer_meta.json"
    factors = [captured._lr_factor(s) for s in range(args.steps)]
    export_captured_batches(captured, args.steps, batches, meta, factors)
    out = peer_train(model, batches, meta, args.ttt, work / "speculators", TIMING_WARMUP)
    batches.unlink()  # one copy of the states is enough: the capture
    return out


def served_all(args, model: Path, drafter: Path, source: list, out: Path, log: Path) -> dict:
    return served(
        model, drafter, source, out, log, "--k", args.k, "--max-new-tokens",
        args.eval_max_new_tokens, "--baseline",
    )  # fmt: skip


TIMING_WARMUP = 2  # steps not timed (allocator and thread-pool warm-up)


def training_figures(args, captured_hist, online_hist, peer) -> dict:
    captured_s, captured_tokens = timed(captured_hist, TIMING_WARMUP)
    online_s, online_tokens = timed(online_hist, TIMING_WARMUP)
    captured_rate, online_rate = captured_tokens / captured_s, online_tokens / online_s
    out = {
        "steps": args.steps,
        "online_steps": args.online_steps,
        "timed_steps_after_warmup": TIMING_WARMUP,
        "eyas_captured_tok_s": round(captured_rate, 1),
        "eyas_captured_step_s": round(captured_s / (args.steps - TIMING_WARMUP), 3),
        "eyas_online_tok_s": round(online_rate, 1),
        "eyas_online_step_s": round(online_s / (args.online_steps - TIMING_WARMUP), 3),
        "captured_vs_online": round(captured_rate / online_rate, 2),
        "eyas_loss_first_last": [captured_hist[0].loss, captured_hist[-1].loss],
        "eyas_train_acc_last": captured_hist[-1].per_step_acc,
        "eyas_acceptance_estimate_last": captured_hist[-1].acceptance_estimate,
    }
    if peer is not None:
        rate = captured_tokens / peer["timed_seconds"]
        out.update(
            {
                "speculators_tok_s": round(rate, 1),
                "speculators_step_s": round(peer["timed_seconds"] / peer["timed_steps"], 3),
                "speculators_loss_first_last": [peer["losses"][0], peer["losses"][-1]],
                "eyas_captured_vs_speculators": round(captured_rate / rate, 2),
            }
        )
    return out


def rows_of(result: dict) -> dict[str, dict]:
    """Per benchmark (or held-out dataset): acceptance, per position, prompts."""
    return {
        name: {
            "acceptance_length": d["acceptance_length"],
            "per_position": d["per_position"],
            "prompts": d.get("prompts"),
        }
        for name, d in result["datasets"].items()
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-rows", type=int, default=60, help="rows per chat dataset")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="regenerated tokens")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--online-steps", type=int, default=8, help="online steps (timed only)")
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--bench", default="mt_bench,humaneval", help="comma list of benchmarks")
    ap.add_argument("--bench-limit", type=int, default=10, help="prompts per benchmark")
    ap.add_argument("--eval-max-new-tokens", type=int, default=64)
    ap.add_argument("--heldout", type=int, default=0, help="held-out chat prompts per dataset")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (eyas and peer)")
    ap.add_argument("--json", default="bench/results/real.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    load_start = os.getloadavg()
    model = smollm2_dir()
    stamp = json.loads((model.parent / "smollm2.json").read_text())
    work = args.workdir or Path(tempfile.mkdtemp(prefix="eyas-bench-real-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    seconds: dict[str, float] = {}

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.0f}s] {msg}", flush=True)

    train_prep, n_train = prepare(model, work / "train", args.train_rows, TRAIN_SEED, set())
    gen = work / "generate"
    say(f"generating {n_train} conversations through vLLM (reused when done)")
    seconds.update(generate(model, train_prep, gen, args.max_new_tokens, log))
    manifest = json.loads((gen / "manifest.json").read_text())["this_run"]
    cap = work / "capture"
    say("capturing through vLLM (reused when done)")
    seconds["capture"] = capture(model, gen, cap, log)
    cap_manifest = json.loads((cap / "manifest.json").read_text())

    for name in ("eyas-online", "eyas-captured", "eyas-vllm", "speculators"):
        shutil.rmtree(work / name, ignore_errors=True)  # training always starts from step 0
    say(f"eyas from captures: {args.steps} steps")
    t0 = time.perf_counter()
    captured = Trainer(
        train_cfg(args, model, work / "eyas-captured", args.steps, hidden_states=cap),
        log=lambda s: None,
    )
    captured.setup()
    captured_hist = captured.train()
    captured.finish()  # the final drafter/ that export reads
    seconds["train_eyas_captured"] = time.perf_counter() - t0
    draft_vocab = int(captured.raw_model.config.draft_vocab_size)
    peer = None
    if not args.no_peer:
        say(f"speculators on the same batches: {args.steps} steps")
        t0 = time.perf_counter()
        peer = peer_train_all(args, model, captured, work)
        seconds["train_speculators"] = time.perf_counter() - t0
    captured.cleanup()
    say(f"eyas online: {args.online_steps} steps (timed)")
    t0 = time.perf_counter()
    online = Trainer(
        train_cfg(args, model, work / "eyas-online", args.online_steps, data=gen),
        log=lambda s: None,
    )
    online.setup()
    online_hist = online.train()
    online.cleanup()
    seconds["train_eyas_online"] = time.perf_counter() - t0
    training = training_figures(args, captured_hist, online_hist, peer)
    training["draft_vocab_size"] = draft_vocab
    training["supervised_tokens_per_step"] = round(
        sum(m.trained_positions for m in captured_hist) / len(captured_hist)
    )
    cli(
        "export", "drafter", "--checkpoint", work / "eyas-captured", "--format", "vllm",
        "--out", work / "eyas-vllm", log=log,
    )  # fmt: skip
    drafters = {"eyas": work / "eyas-vllm"}
    if peer is not None:
        drafters["speculators"] = work / "speculators"

    sources = {"bench": ["--bench", args.bench, "--limit", args.bench_limit]}
    if args.heldout:
        heldout, _ = prepare(
            model, work / "heldout", args.heldout, HELDOUT_SEED, conversation_ids(train_prep)
        )
        sources["heldout"] = ["--input", heldout, "--limit", args.heldout]
    results: dict[str, dict] = {}
    for name, path in drafters.items():
        results[name] = {"rows": {}, "runs": {}}
        for kind, source in sources.items():
            say(f"serving {name} in vLLM: {kind}")
            t0 = time.perf_counter()
            r = served_all(args, model, path, source, work / f"eval-{name}-{kind}.json", log)
            seconds[f"eval_{name}_{kind}"] = time.perf_counter() - t0
            results[name]["rows"].update(rows_of(r))
            results[name]["runs"][kind] = {
                "acceptance_length": r["acceptance_length"],
                "per_position": r["per_position"],
                "throughput": r["throughput"],
                "lossless": r["lossless"],
                "settings": r["settings"],
                "rejected": {
                    row["benchmark"]: row["rejected"]
                    for row in (r.get("model_card") or {}).get("rows", [])
                },
            }
    seconds["total"] = time.perf_counter() - started
    load_end = os.getloadavg()

    print(
        f"SmolLM2-135M-Instruct (fp32, CPU, {args.threads} torch threads); {n_train} "
        f"conversations regenerated by vLLM ({manifest['output_tokens']} tokens; "
        f"{cap_manifest['counts']['samples']} captured, {cap_manifest['counts']['tokens']} "
        f"tokens), {args.steps} optimizer steps of {args.batch_tokens} tokens, TTT {args.ttt}, "
        f"draft vocab {draft_vocab}; served chain k={args.k}, <= {args.eval_max_new_tokens} "
        "new tokens"
    )
    print("acceptance length (tokens per verify step, bonus included)")
    print(f"{'benchmark':<16}" + "".join(f"{n:>14}" for n in results))
    names = list(results["eyas"]["rows"])
    for ds in names:
        cells = [r["rows"].get(ds, {}).get("acceptance_length", "-") for r in results.values()]
        print(f"{ds:<16}" + "".join(f"{c:>14}" for c in cells))
    for kind in sources:
        for key, label in (("speedup", "speedup"), ("lossless", "lossless")):
            cells = [
                r["runs"][kind]["throughput"].get("speedup")
                if key == "speedup"
                else r["runs"][kind]["lossless"]
                for r in results.values()
            ]
            print(f"{label + ' ' + kind:<16}" + "".join(f"{c!s:>14}" for c in cells))
    print("training:", json.dumps(training))
    print("stage seconds:", {k: round(v, 1) for k, v in seconds.items()})
    print(f"load average at start {load_start}, at end {load_end}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(
        json.dumps(
            {
                "bench": "real",
                "target": {
                    "model": stamp["model"],
                    "weights_sha256": stamp["weights_sha256"],
                    "dtype": "float32",
                },
                "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
                "device": "cpu",
                "torch_threads": args.threads,
                "date": time.strftime("%Y-%m-%d"),
                "settings": {
                    k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
                },
                "load_average": {"start": load_start, "end": load_end},
                "data": {
                    "training_conversations": n_train,
                    "generate": manifest,
                    "captured": cap_manifest["counts"],
                    "captured_excluded": cap_manifest.get("excluded"),
                },
                "training": training,
                "served": results,
                "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
                "workdir": str(work),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
