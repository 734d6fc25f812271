#!/usr/bin/env bash
# Build the speculators 0.9.0 environment for the training-throughput peer comparison
# (speculators on CPU): a separate venv, because speculators pins transformers <= 5.19.
# speculators and hs-connectors go in with --no-deps (their full pins pull CUDA torch), then
# the runtime dependencies the EAGLE-3 model path imports. Idempotent via a stamp file.
set -euo pipefail
VENV="${1:-${EYAS_SPECULATORS_VENV:-${EYAS_CACHE:-$HOME/.cache/eyas}/speculators-venv}}"
STAMP="$VENV/.eyas-speculators-ready"
[ -f "$STAMP" ] && { echo "$VENV"; exit 0; }
. "$(dirname "$0")/venv_lib.sh"
fresh_venv "$VENV"
"$VENV/bin/pip" install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0
"$VENV/bin/pip" install -q aiohttp click 'datasets>=4.0.0,<=5.1.0' httpx huggingface-hub \
    'loguru>=0.7.2,<=0.7.3' 'numpy>=2.0.0,<=2.5.4' 'openai>=2.0.0' protobuf psutil \
    'pydantic>=2' 'pydantic-settings>=2' rich safetensors 'tqdm>=4.66.3,<=4.70.1' \
    'transformers>=5.0.0,<=5.19.0' 'typer>=0.12'
touch "$STAMP"
echo "$VENV"
