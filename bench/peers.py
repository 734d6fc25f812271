"""Shared by the benchmarks: the commit a run measures, and the peer tools, each in its own venv
(their pins clash with eyas's)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> str:
    """The commit this script runs from (`+dirty` when its code has changes)."""
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        # the results file this run writes is not a change to the code
        ["git", "-C", str(ROOT), "status", "--porcelain", "-uno", "--", ".", ":!bench/results"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return rev + ("+dirty" if dirty else "")


def write_results(path: Path, record: dict, started: float, load_before) -> None:
    """Write a benchmark's results file: `record`, then the load average before and after the
    run and its seconds (from `started`, a `time.time()`)."""
    record.setdefault("loadavg_before", list(load_before))
    record["loadavg_after"] = list(os.getloadavg())
    record["seconds"] = round(time.time() - started, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")


def speculators_venv() -> Path:
    """speculators 0.9.0's venv, built on first use by tools/speculators_env.sh (~2 min)."""
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "speculators_env.sh")],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def vllm_python() -> Path:
    """python of the vLLM-on-CPU venv (tools/vllm_env.sh, cached under $EYAS_CACHE)."""
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "vllm_env.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"


def vllm_offline(spec: dict, workdir: Path) -> dict:
    """Run bench/vllm_offline.py (LLM.generate) in the vLLM venv; returns its JSON line."""
    import json
    import os

    path = workdir / "vllm_offline_spec.json"
    path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
    }
    proc = subprocess.run(
        [str(vllm_python()), str(ROOT / "bench" / "vllm_offline.py"), str(path)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"vllm_offline failed:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("EYAS_RESULT "))
    return json.loads(line.removeprefix("EYAS_RESULT "))
