"""eyas against speculators 0.9.0 on one GPU at Kimi-K2.5's width: tokens/s, peak memory,
achieved TFLOP/s and falling losses, each side at its defaults and at equal trainable
parameters, 4k/16k/32k tokens, one process per case.

    # on the GPU machine (no network; the image's torch 2.11 / transformers 5.17), one command:
    bash tools/gpu_bench.sh                       # wheels in .whl/ (tools/gpu_wheels.sh)
    # which runs: python3 bench/bench_train_gpu.py --out bench/results/train_gpu.json
    .venv/bin/python bench/bench_train_gpu.py --tiny --out /tmp/t.json \\
        --spec-python ~/.cache/eyas/speculators-venv/bin/python      # CPU rehearsal (a test)

Two targets of Kimi-K2.5's width (`eyas.testing.wide`): Kimi-K2.5's own config (MLA, hidden
7168, vocabulary 163,840), on which eyas's EAGLE-3 drafter runs with MHA (64 x 128) or MLA (the
target's ranks), and a Llama-shaped verifier of the same width (64 heads of 128, 8 KV heads, MLP
18432, its embedding/norm/head written as safetensors), on which both eyas and speculators'
`Eagle3DraftModel` are built, the same 32k draft vocabulary (eyas's chooser), TTT 7, decay 0.8,
bf16 autocast, fp32 AdamW, one random sequence per case.

Defaults: eyas trains its draft head and runs its fast path on CUDA (activation checkpointing
`auto`, resolved as `eyas train` does on the device: off up to the tokens whose step fits 80% of
the GPU by the estimate, at least 4,096); speculators freezes its head (`simple_flex_attention`,
eager KL loss: its fused loss failed under torch 2.11 on 2026-12-04). Equal trainable parameters: eyas
with `--eagle3.draft-head frozen` against speculators' default (756M each), and eyas's default against
speculators with its head trained (985M each).

Before any timing, the fast path is compared with the reference path on the device (compiled
FlexAttention included): loss and gradients of a small drafter, MHA with GQA and MLA.

Per case: warm-up steps (compilation), then timed steps; tokens/s, peak
(`max_memory_allocated`) and static memory, losses of every step (the same batch: they must
fall), achieved TFLOP/s = the step's FLOPs (eyas: `eyas.train.step_flops`, equal to
FlopCounterMode's count; speculators: its FlopCounterMode count from
bench/results/train_flops.json) / step time, and for eyas the budget's prediction beside it.
Cases run in priority order while a case's timeout still fits `--budget-s` (default 440 s: the
whole command, wheels and setup included, stays under 8 minutes); the rest are recorded as
skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
TTT, DECAY = 7, 0.8
K = 1024
# What an eyas case runs, as `eyas train` does since 2026-12-07: `auto` activation checkpointing
# by the GPU's memory (`eyas.train.budget.auto_checkpointing_above`; before, on above 4,096
# tokens), the drafter's frozen tensors in bf16 (`eyas.train.precision`; before, fp32 on one
# GPU) and the target's embedding off the device (before, beside its head). "2026-12-07b": a
# trained head's gradient summed over 4 loss chunks (`fused_loss.WEIGHT_GRAD_CHUNKS`; before,
# per chunk) and `--fast-path compiled` compiling the norms, rotations and SwiGLU too (before,
# the merge and the loss's arithmetic). Cases measured under another definition (or none) are
# not kept by `--fill`: they ran another configuration.
EYAS_DEFINITION = "2026-12-07b"

# (name, side, target, attention, tokens, draft head, fast path), in the order they run: first
# the questions the next figures answer (eyas against speculators at equal trainable
# parameters; whether --fast-path compiled, which compiles the elementwise work -- the ~30% of
# unfused elementwise time in the 2026-12-04 profile -- is faster than the default, which then
# becomes whichever is), then Kimi's drafters, then the rest
CASES = [
    ("eyas llama frozen", "eyas", "llama", "mha", 4 * K, "frozen", "on"),
    ("speculators", "spec", "llama", "mha", 4 * K, "frozen", None),
    ("eyas llama frozen compiled", "eyas", "llama", "mha", 4 * K, "frozen", "compiled"),
    ("eyas llama frozen", "eyas", "llama", "mha", 16 * K, "frozen", "on"),
    ("eyas llama frozen compiled", "eyas", "llama", "mha", 16 * K, "frozen", "compiled"),
    ("eyas kimi mha", "eyas", "kimi", "mha", 16 * K, "trained", "on"),
    ("eyas kimi mha compiled", "eyas", "kimi", "mha", 16 * K, "trained", "compiled"),
    ("eyas kimi mla", "eyas", "kimi", "mla", 16 * K, "trained", "on"),
    ("eyas kimi mla compiled", "eyas", "kimi", "mla", 16 * K, "trained", "compiled"),
    ("speculators", "spec", "llama", "mha", 16 * K, "frozen", None),
    ("eyas llama", "eyas", "llama", "mha", 4 * K, "trained", "on"),
    ("speculators head trained", "spec", "llama", "mha", 4 * K, "trained", None),
    ("eyas llama frozen", "eyas", "llama", "mha", 32 * K, "frozen", "on"),
    ("speculators", "spec", "llama", "mha", 32 * K, "frozen", None),
    ("eyas kimi mha", "eyas", "kimi", "mha", 4 * K, "trained", "on"),
    ("eyas kimi mla", "eyas", "kimi", "mla", 4 * K, "trained", "on"),
    ("eyas kimi mha", "eyas", "kimi", "mha", 32 * K, "trained", "on"),
    ("eyas kimi mla", "eyas", "kimi", "mla", 32 * K, "trained", "on"),
    ("eyas llama", "eyas", "llama", "mha", 16 * K, "trained", "on"),
    ("speculators head trained", "spec", "llama", "mha", 16 * K, "trained", None),
    ("eyas kimi mha reference path", "eyas", "kimi", "mha", 4 * K, "trained", "off"),
    ("eyas kimi mha reference path", "eyas", "kimi", "mha", 16 * K, "trained", "off"),
]
# --tiny: the same code at toy width on CPU, a few cases (tests/benchmarks/test_bench_train_gpu)
TINY_CASES = [
    ("eyas llama frozen", "eyas", "llama", "mha", 128, "frozen", "on"),
    ("speculators", "spec", "llama", "mha", 128, "frozen", None),
    ("eyas kimi mla", "eyas", "kimi", "mla", 128, "trained", "on"),
    ("eyas kimi mla compiled", "eyas", "kimi", "mla", 128, "trained", "compiled"),
    ("eyas kimi mha reference path", "eyas", "kimi", "mha", 128, "trained", "off"),
]


# -- one eyas case, in its own process --------------------------------------------------------


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _load_vocab(path: Path) -> dict:
    from safetensors.torch import load_file

    maps = load_file(str(path))
    return {**maps, "draft_vocab_size": int(maps["t2d"].sum())}


def eyas_case(spec: dict) -> dict:
    from eyas.drafter.fast_path import fast_path_on, loss_compiled
    from eyas.drafter.loss import Teacher, resolved
    from eyas.testing.wide import eagle3_drafter, random_batch
    from eyas.train.budget import resolved_checkpointing_above, trainer_budget
    from eyas.train.precision import hold_frozen

    dev = _device()
    target, tokens = Path(spec["target_dir"]), spec["tokens"]
    vocab = _load_vocab(Path(spec["vocab"]))
    cfg = json.loads((target / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    g = torch.Generator().manual_seed(0)
    v, h = text["vocab_size"], text["hidden_size"]
    embed = (torch.randn(v, h, generator=g) * 0.02).to(dev, torch.bfloat16)
    head = (torch.randn(v, h, generator=g) * 0.02).to(dev, torch.bfloat16)
    torch.manual_seed(0)
    with torch.device(dev):
        d = eagle3_drafter(
            target, vocab, embed, head, attention=spec["attention"], draft_head=spec["head"],
            ttt=TTT, loss_decay=DECAY, fast_path=spec["fast"], activation_checkpointing="auto",
        )  # fmt: skip
    model, method, tcfg = d.model.to(dev), d.method, d.cfg
    hold_frozen(model, torch.bfloat16)  # the trainer's bf16 (eyas.train.precision)
    del embed  # the target's embedding is read by the drafter's init only: off the device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95))
    ids, sup, aux, final = random_batch(d, tokens, dev)
    from eyas.drafter.memory import checkpointing_on

    fast = fast_path_on(tcfg, dev)

    def budget_of(ac: bool):
        return trainer_budget(
            model, head, d.n_aux, TTT, tokens, 1, False, dev, checkpointing=ac, dtype_bytes=2,
            fast=fast,
        )  # fmt: skip

    # `auto` as `eyas train` resolves it on this device (the Trainer's _resolve_checkpointing)
    above = resolved_checkpointing_above(tcfg, lambda: budget_of(False), dev)
    if above is not None:
        tcfg.activation_checkpointing_above = above
    ac = checkpointing_on(tcfg, tokens)
    budget = budget_of(ac)

    def step() -> float:
        prep = method.prepare(model, ids, sup, train_cfg=tcfg, seeds=[0])
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss, stats = method.loss(
                model, model, prep, aux=aux, teacher=Teacher(final, head),
                normalizer=prep.counts.tolist(), train_cfg=tcfg,
            )  # fmt: skip
            loss.backward()
        resolved(stats)  # the trainer's one read per micro-batch
        value = float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return value

    losses, times, static = [], [], 0
    for i in range(spec["warmup"] + spec["steps"]):
        if dev == "cuda":
            torch.cuda.synchronize()
            if i == spec["warmup"]:
                static = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        losses.append(round(step(), 4))
        if dev == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step_s = sum(times[spec["warmup"] :]) / spec["steps"]
    if spec.get("profile"):
        _profile(step, Path(spec["profile"]), dev)
    return {
        "trainable_parameters": sum(p.numel() for p in params),
        "activation_checkpointing": ac,
        "activation_checkpointing_above": tcfg.activation_checkpointing_above,
        "definition": EYAS_DEFINITION,
        "held": {"frozen": "bfloat16", "target_embedding": False},
        "fast_path": fast,
        "loss_compiled": loss_compiled(tcfg),
        "step_seconds": [round(x, 4) for x in times],
        "step_s": round(step_s, 4),
        "tokens_per_s": round(tokens / step_s, 1),
        "losses": losses,
        "static_gb": round(static / 1e9, 3) if dev == "cuda" else None,
        "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3) if dev == "cuda" else None,
        "flops_per_step": budget.flops_per_step,
        "budget": {
            "total_gb": budget.total_gb,
            "tokens_per_s": budget.tokens_per_s,
            "gflop_per_token": budget.gflop_per_token,
            "mfu": budget.mfu,
        },
    }


def _profile(step, out: Path, dev: str) -> None:
    """One more step under torch.profiler: the operators by device time (where a step's time
    goes, for the next change), written as a table."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    with profile(activities=acts) as prof:
        step()
        if dev == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if dev == "cuda" else "self_cpu_time_total"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(prof.key_averages().table(sort_by=key, row_limit=45, max_name_column_width=70))


# -- the fast path against the reference on this device ----------------------------------------


def check_paths(spec: dict) -> dict:
    """Loss and every gradient of a small drafter on this device (CUDA: FlexAttention compiled):
    the fast path and the reference path under bf16 autocast, each against the reference path
    in fp32 (no autocast), the nearest to the exact gradient there is. The fast path agrees when
    it is within the CPU tests' bf16 tolerance of the bf16 reference, or no further from the
    fp32 run than the bf16 reference is (x 1.25)."""
    from eyas.drafter.loss import Teacher
    from eyas.testing.wide import eagle3_drafter, random_batch

    dev, out = _device(), {}
    for name, target, attention in (("gqa", "llama", "mha"), ("mla", "kimi", "mla")):
        tdir = Path(spec["targets"][target])
        vocab = _load_vocab(Path(spec["vocabs"][target]))
        text = json.loads((tdir / "config.json").read_text())
        text = text.get("text_config", text)
        g = torch.Generator().manual_seed(0)
        v, h = text["vocab_size"], text["hidden_size"]
        embed = (torch.randn(v, h, generator=g) * 0.02).to(dev)
        head = (torch.randn(v, h, generator=g) * 0.5).to(dev, torch.bfloat16)
        results = {}
        modes = (
            ("fp32", "off", False), ("off", "off", True), ("on", "on", True),
            ("compiled", "compiled", True),
        )  # fmt: skip
        for label, fast, bf16 in modes:
            torch.manual_seed(0)
            with torch.device(dev):
                d = eagle3_drafter(
                    tdir, vocab, embed, head, attention=attention, ttt=TTT, fast_path=fast,
                    activation_checkpointing="on",
                )  # fmt: skip
            ids, sup, aux, final = random_batch(d, spec["tokens"], dev)
            if not bf16:  # the same bf16-drawn inputs, held in fp32
                aux, final = aux.float(), final.float()
            prep = d.method.prepare(d.model, ids, sup, train_cfg=d.cfg, seeds=[0])
            teacher = Teacher(final, head if bf16 else head.float())
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
                loss, _ = d.method.loss(
                    d.model, d.model, prep, aux=aux,
                    teacher=teacher, normalizer=prep.counts.tolist(), train_cfg=d.cfg,
                )  # fmt: skip
                loss.backward()
            grads = {n: p.grad.float() for n, p in d.model.named_parameters() if p.grad is not None}
            results[label] = (float(loss.detach()), grads)

        def worst(a: dict, b: dict) -> tuple[float, str]:
            errs = {n: float((a[n] - b[n]).norm() / b[n].norm().clamp_min(1e-30)) for n in b}
            key = max(errs, key=errs.get)
            return errs[key], key

        (l32, g32), (l_ref, g_ref), (l_fast, g_fast) = (results[k] for k in ("fp32", "off", "on"))
        fast_ref, fast_ref_at = worst(g_fast, g_ref)
        fast_32, fast_32_at = worst(g_fast, g32)
        ref_32, ref_32_at = worst(g_ref, g32)
        row = {
            "loss_fp32": round(l32, 6),
            "loss_reference": round(l_ref, 6),
            "loss_fast": round(l_fast, 6),
            "loss_rel_err": abs(l_fast - l_ref) / abs(l_ref),
            "grad_rel_err_max": fast_ref,
            "grad_rel_err_max_at": fast_ref_at,
            "fast_vs_fp32": fast_32,
            "fast_vs_fp32_at": fast_32_at,
            "reference_vs_fp32": ref_32,
            "reference_vs_fp32_at": ref_32_at,
            "same_parameters": sorted(g_ref) == sorted(g_fast) == sorted(g32),
        }
        # the tolerances the CPU tests state for bf16 (tests/drafter/test_fast_path.py), or no
        # further from fp32 than the bf16 reference path is
        close = (row["loss_rel_err"] <= 1e-3 and fast_ref <= 3e-2) or fast_32 <= 1.25 * ref_32
        row["agree"] = bool(close and row["same_parameters"])
        # --fast-path compiled by the same rule (its loss arithmetic through torch.compile)
        l_comp, g_comp = results["compiled"]
        comp_ref, _ = worst(g_comp, g_ref)
        comp_32, comp_32_at = worst(g_comp, g32)
        row.update(
            loss_compiled=round(l_comp, 6),
            compiled_vs_fp32=comp_32,
            compiled_vs_fp32_at=comp_32_at,
            compiled_agree=bool(
                sorted(g_comp) == sorted(g_ref)
                and (
                    (abs(l_comp - l_ref) / abs(l_ref) <= 1e-3 and comp_ref <= 3e-2)
                    or comp_32 <= 1.25 * ref_32
                )
            ),
        )
        out[name] = row
    return out


# -- the driver ----------------------------------------------------------------------------------


def _run(cmd: list[str], timeout: float, env: dict) -> dict:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:  # how far it came: the last lines it printed
        said = "".join(
            x.decode(errors="replace") if isinstance(x, bytes) else x
            for x in (exc.stdout or "", exc.stderr or "")
        )
        tail = " | ".join(said.strip().splitlines()[-3:])
        return {"error": f"timed out after {timeout:.0f} s" + (f" ({tail[-300:]})" if tail else "")}
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        return {"error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-600:]}"}
    return json.loads(line.removeprefix("RESULT "))


def _spec_flops(tokens: int, train_head: bool) -> int | None:
    """speculators' FlopCounterMode count for this case (bench/bench_train_flops.py)."""
    path = ROOT / "bench" / "results" / "train_flops.json"
    if not path.exists():
        return None
    for row in json.loads(path.read_text()).get("speculators", []):
        if row["tokens"] == tokens and row["train_head"] == train_head:
            return row["flops"]
    return None


def _setup(work: Path, tiny: bool) -> dict:
    from safetensors.torch import save_file

    from eyas.testing.wide import random_vocab, write_target

    targets, vocabs = {}, {}
    for kind in ("kimi", "llama"):
        # speculators loads the verifier's embedding, norm and head: the llama target has them
        tdir = write_target(work / kind, kind, tiny=tiny, weights=kind == "llama")
        text = json.loads((tdir / "config.json").read_text())
        text = text.get("text_config", text)
        maps = random_vocab(text["vocab_size"])
        save_file({"t2d": maps["t2d"], "d2t": maps["d2t"]}, str(work / f"{kind}-vocab.safetensors"))
        targets[kind], vocabs[kind] = str(tdir), str(work / f"{kind}-vocab.safetensors")
    return {"targets": targets, "vocabs": vocabs}


def _peak_tflops() -> float | None:
    from eyas.train.budget import device_peak

    peak = device_peak("cuda")
    return peak / 1e12 if peak else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/train_gpu.json")
    ap.add_argument("--tiny", action="store_true", help="toy width on any device (rehearsal)")
    ap.add_argument(
        "--budget-s", type=float, default=440,
        help="seconds for the whole run: a case starts only if its timeout still fits",
    )  # fmt: skip
    ap.add_argument("--case-timeout", type=float, default=150)
    ap.add_argument(
        "--peer-timeout", type=float, default=300,
        help="speculators' cases above 4,096 tokens: its compile did not finish in 180 s at 16k",
    )  # fmt: skip
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--spec-python", default=sys.executable, help="python with speculators")
    ap.add_argument(
        "--profile", type=Path,
        help="folder: one extra step of each eyas case at --profile-tokens under torch.profiler, "
        "its operator table written there",
    )  # fmt: skip
    ap.add_argument("--profile-tokens", type=int, default=16 * K)
    ap.add_argument(
        "--only", action="append", default=[],
        help="run only the cases named NAME@TOKENS (repeatable; e.g. 'speculators@16384')",
    )  # fmt: skip
    ap.add_argument("--no-check", action="store_true", help="skip the fast/reference check")
    ap.add_argument(
        "--fill", type=Path,
        help="an earlier results file: its measured cases are kept (not rerun), the rest run",
    )  # fmt: skip
    ap.add_argument("--case", help=argparse.SUPPRESS)  # internal: one eyas case (JSON)
    ap.add_argument("--check", help=argparse.SUPPRESS)  # internal: the path check (JSON)
    args = ap.parse_args()
    if args.case or args.check:
        try:
            res = (
                eyas_case(json.loads(args.case))
                if args.case
                else check_paths(json.loads(args.check))
            )
        except torch.OutOfMemoryError as exc:
            res = {"oom": str(exc).splitlines()[0][:200]}
        except Exception as exc:  # recorded; the next case still runs
            import traceback

            traceback.print_exc()
            res = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        print("RESULT " + json.dumps(res), flush=True)
        return

    started = time.time()
    work = Path(tempfile.mkdtemp(prefix="eyas-train-gpu-"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
    }
    if not torch.cuda.is_available():  # CPU rehearsal: one thread per process, no oversubscription
        env["OMP_NUM_THREADS"] = "1"
    setup = _setup(work, args.tiny)
    dev = _device()
    record: dict = {
        "bench": "train_gpu",
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["bench/bench_train_gpu.py", *sys.argv[1:]]),
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else f"cpu ({platform.machine()})",
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "tiny": args.tiny,
        "ttt": TTT,
        "loss_decay": DECAY,
        "peak_bf16_tflops": _peak_tflops(),
        "load_average": {"start": list(os.getloadavg())},
        "cases": [],
    }

    kept = {}
    if args.fill is not None:  # measured cases of an earlier run, each with its own date
        earlier = json.loads(args.fill.read_text())
        for c in earlier.get("cases", []):
            current = c.get("side") != "eyas" or c.get("definition") == EYAS_DEFINITION
            if c.get("tokens_per_s") and earlier.get("device") == record["device"] and current:
                kept[(c["name"], c["tokens"])] = {"measured": earlier.get("date"), **c}
        record["filled_from"] = str(args.fill)

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=2) + "\n")

    print(
        f"[{time.time() - started:5.0f}s] the fast path against the reference on {dev}", flush=True
    )
    check = {**setup, "tokens": 64 if args.tiny else 2048}
    record["path_check"] = (
        {"skipped": "--no-check"}
        if args.no_check
        else _run([sys.executable, __file__, "--check", json.dumps(check)], args.case_timeout, env)
    )
    print(json.dumps(record["path_check"]), flush=True)
    save()
    for name, side, target, attention, tokens, head, fast in TINY_CASES if args.tiny else CASES:
        if args.only and f"{name}@{tokens}" not in args.only:
            continue
        if (name, tokens) in kept:
            record["cases"].append(kept[(name, tokens)])
            continue
        case = {"name": name, "side": side, "target": target, "tokens": tokens, "draft_head": head}
        if side == "eyas":
            case.update(attention=attention, fast_path=fast)
        timeout = args.peer_timeout if side == "spec" and tokens > 4 * K else args.case_timeout
        if time.time() - started + timeout > args.budget_s:
            record["cases"].append({**case, "skipped": "time budget"})
            continue
        if side == "eyas":
            spec = {
                "target_dir": setup["targets"][target], "vocab": setup["vocabs"][target],
                "attention": attention, "head": head, "fast": fast, "tokens": tokens,
                "warmup": args.warmup, "steps": args.steps,
            }  # fmt: skip
            if args.profile and tokens == args.profile_tokens:
                slug = f"{name}-{tokens}".replace(" ", "_")
                spec["profile"] = str(args.profile / f"profile-{slug}.txt")
            cmd = [sys.executable, __file__, "--case", json.dumps(spec)]
        else:
            cmd = [
                args.spec_python, str(ROOT / "bench" / "peer_speculators_gpu.py"),
                "--verifier", setup["targets"][target], "--vocab", setup["vocabs"][target],
                "--tokens", str(tokens), "--warmup", str(args.warmup), "--steps", str(args.steps),
                *(["--train-head"] if head == "trained" else []),
            ]  # fmt: skip
        began = time.time()
        res = _run(cmd, timeout, env)
        # the whole process: start-up, compiles (the first warm-up step's share is in
        # step_seconds), steps; what a case costs of a lease
        case.update(res, wall_s=round(time.time() - began, 1))
        flops = (
            res.get("flops_per_step") if side == "eyas" else _spec_flops(tokens, head == "trained")
        )
        if flops and res.get("step_s"):
            case["flops_per_step"] = flops
            case["achieved_tflops"] = round(flops / res["step_s"] / 1e12, 1)
        if res.get("losses"):
            case["losses_fall"] = res["losses"][-1] < res["losses"][0]
        record["cases"].append(case)
        print(
            f"[{time.time() - started:5.0f}s] {name} {tokens}: "
            + (
                f"{res['tokens_per_s']:,.0f} tokens/s, peak {res.get('peak_gb')} GB, "
                f"{case.get('achieved_tflops')} TFLOP/s, losses {res['losses']}"
                if "tokens_per_s" in res
                else str(res)[:300]
            ),
            flush=True,
        )
        save()
    record["load_average"]["end"] = list(os.getloadavg())
    record["seconds"] = round(time.time() - started, 1)
    save()
    print(f"{'case':<32}{'tokens':>8}{'trainable':>12}{'tokens/s':>10}{'peak GB':>9}{'TFLOP/s':>9}")
    for c in record["cases"]:
        print(
            f"{c['name']:<32}{c['tokens']:>8}{c.get('trainable_parameters', 0) / 1e6:>11.0f}M"
            f"{c.get('tokens_per_s') or 0:>10,.0f}{c.get('peak_gb') or 0:>9}"
            f"{c.get('achieved_tflops') or 0:>9}"
            + (
                f"  {c.get('skipped') or c.get('error') or c.get('oom')}"
                if "tokens_per_s" not in c
                else ""
            )
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
