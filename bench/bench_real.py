"""eyas against vLLM speculators' `Eagle3` drafter on a real pretrained target, same data, same
optimizer steps, both served in the same vLLM.

    .venv/bin/python bench/bench_real.py [--steps 30] [--train-rows 16] [--bench heldout]
        [--no-peer] [--workdir DIR]

Target: HF's SmolLM2-135M-Instruct (tools/smollm2.sh; 30 layers, hidden 576, vocab 49152),
fp32 on CPU. Stages, each timed:
1. data: the toy chat datasets (B4 ShareGPT, B5 UltraChat, B6 math, B7 code, B8 reasoning)
   rendered with SmolLM2's template and regenerated greedily through vLLM on CPU
   (`eyas generate --backend vllm`); held-out prompts from other seeds, minus any conversation
   that also trains;
2. capture: `eyas capture --backend vllm` (the aux layers and the last layer, fp32);
3. training, the same `--steps` optimizer steps on the same batches:
   - eyas online (the target in process) and eyas from the captures;
   - speculators 0.9.0 `Eagle3DraftModel` (one llama layer, sdpa, eager KL loss, decay 0.8;
     its model-level training on CPU, bench/peer_speculators_train.py in its own venv) on
     exactly the batches eyas online trained, packed as speculators packs them, with eyas's
     draft vocabulary, AdamW and clipping;
4. serving: each drafter inside vLLM (`eyas eval --backend vllm --baseline`, chain k), the
   acceptance length per benchmark (tokens per verify step, bonus included) and the served
   speedup over the same vLLM without a drafter.

`--bench` takes a comma list: `heldout` (default: the held-out chat prompts, one row per
dataset) or benchmark sets when this eyas has `eyas eval --bench` (MT-Bench, HumanEval, BFCL).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_local_generate import smollm2_dir
from bench_train import export_peer_batches, timed
from peers import ROOT, speculators_venv, vllm_python

from eyas.config import EvalConfig, TrainConfig
from eyas.render.renderer import Renderer
from eyas.render.run import render_file
from eyas.serving.vllm import vllm_server
from eyas.sources.run import convert_file
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.train.loop import Trainer

CHAT = ("b4_sharegpt", "b5_ultrachat", "b6_math", "b7_code", "b8_reasoning")
TRAIN_SEED, HELDOUT_SEED = 21, 77


def cli(*args, log: Path) -> float:
    """Run `eyas ...` as a user would; the seconds it took. Output goes to `log`."""
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ eyas {' '.join(map(str, args))}\n")
        f.flush()
        rc = subprocess.run(
            [sys.executable, "-m", "eyas.cli", *map(str, args)], stdout=f, stderr=subprocess.STDOUT
        ).returncode
    if rc != 0:
        raise SystemExit(f"eyas {args[0]} failed ({rc}); see {log}")
    return time.perf_counter() - t0


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


def train_cfg(args, model: Path, out: Path, **kw) -> TrainConfig:
    return TrainConfig(
        target=model,
        out=out,
        steps=args.steps,
        ttt=args.ttt,
        draft_vocab=args.draft_vocab,
        batch_tokens=args.batch_tokens,
        warmup_steps=2,
        checkpoint_every=10_000,
        **kw,
    )


def peer_train(args, model: Path, online: Trainer, work: Path) -> dict:
    batches, meta = work / "peer_batches.safetensors", work / "peer_meta.json"
    export_peer_batches(online, args.steps, batches, meta)
    out = subprocess.run(
        [
            str(speculators_venv() / "bin" / "python"),
            str(ROOT / "bench" / "peer_speculators_train.py"),
            "--data",
            str(batches),
            "--meta",
            str(meta),
            "--verifier",
            str(model),
            "--ttt",
            str(args.ttt),
            "--warmup",
            "2",
            "--save",
            str(work / "speculators"),
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def served(args, model: Path, drafter: Path, heldout: Path, out: Path, log: Path) -> dict:
    bench = [b for b in args.bench.split(",") if b]
    source = ["--input", heldout]
    if bench != ["heldout"]:
        if "bench" not in EvalConfig.model_fields:
            raise SystemExit("--bench needs `eyas eval --bench` (benchmark sets as eyas inputs)")
        source = ["--bench", ",".join(bench)]
    cli(
        "eval", "--target", model, "--drafter", drafter, *source, "--k", args.k,
        "--max-new-tokens", args.eval_max_new_tokens, "--limit", args.eval_rows,
        "--backend", "vllm", "--vllm-python", vllm_python(), "--baseline", "--json", out,
        log=log,
    )  # fmt: skip
    return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--train-rows", type=int, default=16, help="rows per chat dataset")
    ap.add_argument("--eval-rows", type=int, default=4, help="held-out prompts per dataset")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--eval-max-new-tokens", type=int, default=64)
    ap.add_argument("--bench", default="heldout", help="comma list: heldout, or benchmark sets")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (eyas and peer)")
    ap.add_argument("--json", default="bench/results/real.json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, vpy = smollm2_dir(), vllm_python()
    stamp = json.loads((model.parent / "smollm2.json").read_text())
    work = args.workdir or Path(tempfile.mkdtemp(prefix="eyas-bench-real-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "bench.log"
    seconds: dict[str, float] = {}

    train_prep, n_train = prepare(model, work / "train", args.train_rows, TRAIN_SEED, set())
    heldout, n_heldout = prepare(
        model, work / "heldout", args.eval_rows, HELDOUT_SEED, conversation_ids(train_prep)
    )
    gen = work / "generate"
    server_args = ["--dtype", "float32", "--max-model-len", "4096", "--enforce-eager"]
    if not (gen / "manifest.json").exists():  # a rerun on the same --workdir reuses the data
        t0 = time.perf_counter()
        with vllm_server(vpy, model, server_args, log_path=work / "vllm-generate.log") as url:
            seconds["vllm_start"] = time.perf_counter() - t0
            seconds["generate"] = cli(
                "generate", "--model", model, "--backend", "vllm", "--url", url, "--input",
                train_prep, "--out", gen, "--max-new-tokens", args.max_new_tokens,
                "--temperature", "0", "--no-progress", log=log,
            )  # fmt: skip
    manifest = json.loads((gen / "manifest.json").read_text())["this_run"]
    cap = work / "capture"
    if not (cap / "manifest.json").exists():
        seconds["capture"] = cli(
            "capture", "--target", model, "--data", gen, "--out", cap, "--backend", "vllm",
            "--vllm-python", vpy, "--dtype", "float32", log=log,
        )  # fmt: skip

    for name in ("eyas-online", "eyas-captured", "eyas-vllm", "speculators"):
        shutil.rmtree(work / name, ignore_errors=True)  # training always starts from step 0
    online = Trainer(train_cfg(args, model, work / "eyas-online", data=gen), log=lambda s: None)
    online.setup()
    online_hist = online.train()
    online.finish()  # the final drafter/ that export reads
    captured = Trainer(
        train_cfg(args, model, work / "eyas-captured", hidden_states=cap), log=lambda s: None
    )
    captured.setup()
    captured_hist = captured.train()
    online_s, tokens = timed(online_hist, 2)
    captured_s, captured_tokens = timed(captured_hist, 2)
    training = {
        "steps": args.steps,
        "timed_steps": args.steps - 2,
        "supervised_tokens_timed": tokens,
        "eyas_online_tok_s": round(tokens / online_s, 1),
        "eyas_captured_tok_s": round(captured_tokens / captured_s, 1),
        "captured_vs_online": round((captured_tokens / captured_s) / (tokens / online_s), 2),
        "eyas_loss_first_last": [online_hist[0]["loss"], online_hist[-1]["loss"]],
        "draft_vocab_size": int(online.raw_model.config.draft_vocab_size),
    }
    eyas_export = work / "eyas-vllm"
    cli(
        "export", "drafter", "--checkpoint", work / "eyas-online", "--format", "vllm",
        "--out", eyas_export, log=log,
    )  # fmt: skip
    drafters = {"eyas": eyas_export}
    if not args.no_peer:
        peer = peer_train(args, model, online, work)
        training["speculators_tok_s"] = round(tokens / peer["timed_seconds"], 1)
        training["speculators_loss_first_last"] = [peer["losses"][0], peer["losses"][-1]]
        training["eyas_online_vs_speculators"] = round(
            (tokens / online_s) / training["speculators_tok_s"], 2
        )
        drafters["speculators"] = work / "speculators"
    online.cleanup()
    captured.cleanup()

    results = {}
    for name, path in drafters.items():
        t0 = time.perf_counter()
        results[name] = served(args, model, path, heldout, work / f"eval-{name}.json", log)
        seconds[f"eval_{name}"] = time.perf_counter() - t0
    datasets = sorted(results["eyas"]["datasets"])
    print(
        f"SmolLM2-135M-Instruct (fp32, CPU, {torch.get_num_threads()} threads); {n_train} "
        f"training conversations regenerated by vLLM ({manifest['output_tokens']} tokens), "
        f"{args.steps} optimizer steps of {args.batch_tokens} tokens, TTT {args.ttt}; served "
        f"chain k={args.k}, {n_heldout} held-out prompts, <= {args.eval_max_new_tokens} tokens"
    )
    head = f"{'benchmark':<16}" + "".join(f"{n:>14}" for n in results)
    print("acceptance length (tokens per verify step, bonus included)")
    print(head)
    for ds in [*datasets, "all"]:
        cells = [
            r["acceptance_length"] if ds == "all" else r["datasets"][ds]["acceptance_length"]
            for r in results.values()
        ]
        print(f"{ds:<16}" + "".join(f"{c:>14}" for c in cells))
    print(
        f"{'speedup':<16}" + "".join(f"{r['throughput']['speedup']:>14}" for r in results.values())
    )
    print(f"{'lossless':<16}" + "".join(f"{r['lossless']!s:>14}" for r in results.values()))
    print("training, supervised tokens/s:", {k: v for k, v in training.items() if "tok_s" in k})
    print("stage seconds:", {k: round(v, 1) for k, v in seconds.items()})
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
                "device": "cpu",
                "torch_threads": torch.get_num_threads(),
                "date": time.strftime("%Y-%m-%d"),
                "benchmarks": args.bench,
                "data": {
                    "training_conversations": n_train,
                    "heldout_prompts": n_heldout,
                    "generate": manifest,
                },
                "training": training,
                "served": {
                    name: {
                        "acceptance_length": r["acceptance_length"],
                        "per_benchmark": {
                            d: r["datasets"][d]["acceptance_length"] for d in r["datasets"]
                        },
                        "per_position": r["per_position"],
                        "speedup": r["throughput"].get("speedup"),
                        "throughput": r["throughput"],
                        "lossless": r["lossless"],
                        "settings": r["settings"],
                    }
                    for name, r in results.items()
                },
                "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
                "workdir": str(work),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
