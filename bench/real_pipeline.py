"""The stages the real-model benchmarks share (bench_real.py, bench_real_quality.py): eyas's
own CLI as a user runs it, generation and capture through vLLM on CPU, the captured batches
handed to speculators, and served evaluation in vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from peers import ROOT, speculators_venv, vllm_python
from safetensors.torch import save_file

from eyas.backends.vllm.options import VLLMOptions
from eyas.backends.vllm.server import VLLMServer
from eyas.hf_models import target_model
from eyas.train.loop import Trainer

PEER_KEYS = (
    "input_ids",
    "hidden_states",
    "verifier_last_hidden_states",
    "loss_mask",
    "position_ids",
)


# How a stage stops cleanly: generate and capture commit what is done on SIGTERM (and resume
# when rerun); the others unwind on SIGINT (KeyboardInterrupt), eval stopping the vLLM servers
# it started (it has no SIGTERM handler: a SIGTERM would leave them running).
STOP_SIGNAL = {"generate": signal.SIGTERM, "capture": signal.SIGTERM}


def cli(*args, log: Path, ok: tuple[int, ...] = (0,)) -> float:
    """Run `eyas ...` as a user would; the seconds it took. Output goes to `log`; an exit
    status outside `ok` stops the benchmark."""
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ eyas {' '.join(map(str, args))}\n")
        f.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "eyas.cli", *map(str, args)], stdout=f, stderr=subprocess.STDOUT
        )
        try:
            rc = proc.wait()
        except BaseException:  # a kill of the benchmark stops the stage as eyas stops itself
            proc.send_signal(STOP_SIGNAL.get(str(args[0]), signal.SIGINT))
            proc.wait(timeout=300)
            raise
    if rc not in ok:
        raise SystemExit(f"eyas {args[0]} failed ({rc}); see {log}")
    return time.perf_counter() - t0


def finished(stage: Path) -> bool:
    """A generate or capture stage that ran to its end (a stopped run's manifest says
    `complete: false` and is resumed by running the stage again)."""
    path = stage / "manifest.json"
    return path.exists() and json.loads(path.read_text()).get("complete", True) is True


def generate(
    model: Path, prep: Path, gen: Path, max_new_tokens: int, log: Path, *flags
) -> dict[str, float]:
    """`eyas generate --backend vllm` (greedy, exact ids) against a vLLM server started here;
    resumed when GEN holds a stopped run, skipped when it holds a finished one. `flags` adds
    generate flags. Returns {vllm_start, generate} seconds of this call."""
    seconds: dict[str, float] = {}
    if finished(gen):
        return seconds
    server = VLLMOptions(python=vllm_python(), max_model_len=4096)
    t0 = time.perf_counter()
    # 4 GiB of KV cache: room for 128 requests in flight (a CPU server's throughput grows with
    # its batch; the default 1 GiB holds about 40)
    kv = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4")}
    log_path = gen.parent / "vllm-generate.log"
    with VLLMServer(
        server, target_model(model), dtype="float32", env=kv, log_path=log_path
    ) as started:
        url = started.url
        seconds["vllm_start"] = time.perf_counter() - t0
        seconds["generate"] = cli(
            "generate", "--model", model, "--backend", "vllm", "--url", url, "--input", prep,
            "--out", gen, "--max-new-tokens", max_new_tokens, "--temperature", "0",
            "--no-progress", *flags, log=log,
        )  # fmt: skip
    return seconds


def capture(
    model: Path, gen: Path, cap: Path, log: Path, *, method: str = "eagle3", dtype="float32"
) -> float:
    """`eyas capture --backend vllm` (the method's fused layers and the last one); skipped
    when CAP already holds a finished capture. The audit's quarantine beside the data is
    honoured (capture's default)."""
    if finished(cap):
        return 0.0
    return cli(
        "capture", "--target", model, "--data", gen, "--out", cap, "--backend", "vllm",
        "--engine-python", vllm_python(), "--dtype", dtype, "--method", method, log=log,
    )  # fmt: skip


def export_captured_batches(
    trainer: Trainer, steps: range | int, path: Path, meta_path: Path, lr_factors: list[float]
) -> None:
    """The batches of `steps` of a from-capture Trainer, for speculators: each sequence once,
    from the same stored states eyas reads (aux layers, and the last layer before the final
    norm, which speculators applies itself), shifted as speculators' `shift_batch` does
    (x_{j+1}, g_j, y_{j+1}); the steps as lists of sequence indices, packed into one row with
    document ids by the peer. The loss mask is eyas's (index j trains x_{j+2}) so both train
    the same positions; `lr_factors` is eyas's learning-rate factor of each of those steps."""
    steps = range(steps) if isinstance(steps, int) else steps
    target = trainer.target
    n_aux = len(target.aux_layers)
    tensors: dict[str, torch.Tensor] = {
        "t2d": trainer.raw_model.t2d.clone(),
        "d2t": trainer.raw_model.d2t.clone(),
    }
    index: dict[str, int] = {}
    batches = []
    for s in steps:
        seqs, weight = trainer._batch_at(s)
        assert weight == 1.0  # one process: every batch has sequences
        for q in seqs:
            if q.id in index:
                continue
            n = len(q.ids)
            states = target.reader.read(q.source, n).float()  # [n, n_aux + 1, H]
            i = index[q.id] = len(index)
            sup = torch.tensor([*q.supervised, 0])
            tensors[f"{i}.input_ids"] = torch.tensor(q.ids[1:n])
            tensors[f"{i}.hidden_states"] = states[: n - 1, :n_aux].reshape(n - 1, -1).clone()
            tensors[f"{i}.verifier_last_hidden_states"] = states[1:n, n_aux].clone()
            tensors[f"{i}.loss_mask"] = sup[2 : n + 1].to(torch.uint8)
            tensors[f"{i}.position_ids"] = torch.arange(1, n)
        batches.append([index[q.id] for q in seqs])
    save_file(tensors, str(path))
    cfg = trainer.cfg
    meta_path.write_text(
        json.dumps(
            {
                "steps": len(steps),
                "first_step": steps.start,
                "keys": list(PEER_KEYS),
                "sequences": len(index),
                "batches": batches,
                "draft_vocab_size": int(trainer.raw_model.config.draft_vocab_size),
                "aux_layers": list(target.aux_layers),
                "loss_decay": cfg.loss_decay,
                "lr": cfg.lr,
                "lr_factors": lr_factors,
                "clip": cfg.clip,
                "threads": torch.get_num_threads(),
            }
        )
    )


def peer_train(
    model: Path, batches: Path, meta: Path, ttt: int, save: Path, warmup: int, *extra: str
) -> dict:
    """speculators 0.9.0 on exported batches (bench/peer_speculators_train.py in its venv);
    its JSON line. `extra`: more flags for the peer (a resumed segment's state)."""
    cmd = [
        speculators_venv() / "bin" / "python", ROOT / "bench" / "peer_speculators_train.py",
        "--data", batches, "--meta", meta, "--verifier", model, "--ttt", ttt,
        "--warmup", warmup, "--save", save, *extra,
    ]  # fmt: skip
    out = subprocess.run(
        [str(c) for c in cmd],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def served(model: Path, drafter: Path, source: list, out: Path, log: Path, *flags) -> dict:
    """`eyas eval --backend vllm` of DRAFTER on SOURCE (`--bench ...` or `--input ...`), the
    servers started by eyas; `flags` adds eval flags (`--k`, `--baseline`, ...)."""
    cli(
        "eval", "--target", model, "--drafter", drafter, *source, "--backend", "vllm",
        "--engine-python", vllm_python(), *flags, "--json", out, log=log,
    )  # fmt: skip
    return json.loads(out.read_text())
