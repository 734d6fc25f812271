#!/usr/bin/env bash
# SGLang's own Python sources for the contract tests that run SGLang's code on CPU
# (tests/backends/test_sglang_source.py): the rope, layer-id and DFlash-config functions and the
# DFlash2 convolution and selector, read
# from two released wheels on PyPI: 0.5.12.post1 (the last before PR #25454's layer-id rule
# and before YaRN read mscale/mscale_all_dim) and 0.5.23 (the newest at the time of writing).
# Fetches each wheel alone (`pip download --no-deps`, pinned file and sha256), keeps only the
# files the tests read, then deletes the wheel. SGLang itself is never installed or imported
# as a package. Idempotent: a version is extracted again when its stamp (the wheel's sha256 and
# the file list) differs, so adding a file here refreshes an existing cache. Prints the cache
# directory on its last line.
#   tools/sglang_src.sh [PYTHON]      # PYTHON: any python with pip
set -euo pipefail
PY="${1:-${PYTHON:-python3}}"
ROOT="${EYAS_CACHE:-$HOME/.cache/eyas}/sglang-src"
FILES=(
    sglang/srt/layers/rotary_embedding/yarn.py
    sglang/srt/layers/rotary_embedding/factory.py
    sglang/srt/models/llama.py
    sglang/srt/models/qwen3.py
    sglang/srt/models/deepseek_v2.py
    sglang/srt/models/kimi_k25.py
    sglang/srt/models/llama_eagle3.py
    sglang/srt/models/kimi_k25_eagle3.py
    sglang/srt/speculative/dflash_utils.py
    sglang/srt/models/dflash.py
)
declare -A SHA=(
    [0.5.12.post1]=94b3f3cc6b97f1364f247b8d9c1d106ec63cf22c55d6b65bc40ff29b0206ef5f
    [0.5.23]=00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937
)

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9
for version in "${!SHA[@]}"; do
    dest="$ROOT/$version"
    stamp="${SHA[$version]} ${FILES[*]}"
    if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$stamp" ]; then
        continue
    fi
    rm -rf "$dest" "$ROOT/wheel"
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_34_x86_64 "sglang==$version" -d "$ROOT/wheel"
    wheel="$(ls "$ROOT"/wheel/sglang-"$version"-*.whl)"
    got="$(sha256sum "$wheel" | cut -d' ' -f1)"
    if [ "$got" != "${SHA[$version]}" ]; then
        echo "error: $wheel has sha256 $got, expected ${SHA[$version]} [checksum_mismatch]" >&2
        exit 2
    fi
    mkdir -p "$dest"
    "$PY" - "$wheel" "$dest" "${FILES[@]}" <<'EOF'
import sys
import zipfile

wheel, dest, *names = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        z.extract(name, dest)
EOF
    rm -rf "$ROOT/wheel"
    echo "$stamp" >"$dest/.stamp"
done
echo "$ROOT"
