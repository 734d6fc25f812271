"""The vLLM-on-CPU environment (its own venv, built once by tools/vllm_env.sh and cached under
$EYAS_CACHE) for the real-server tests."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "vllm_env.sh")], check=True, capture_output=True, text=True
    )
    return Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"
