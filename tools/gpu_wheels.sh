#!/usr/bin/env bash
# The Python wheels a GPU machine without a network needs for bench/bench_train_gpu.py, and
# their offline install there.
#
#   tools/gpu_wheels.sh download [DIR]   # here, with a network: py3.12 x86-64 wheels into DIR
#                                        # (default .whl, git-ignored)
#   tools/gpu_wheels.sh install [DIR]    # there: into /tmp/site, no index; then
#                                        #   export PYTHONPATH=/tmp/site:src
#
# The GPU image (python 3.12, torch 2.11, transformers 5.17, httpx, pyarrow, pandas, aiohttp,
# huggingface-hub ...) lacks eyas's pydantic, orjson, tomli-w and zstandard, and speculators
# 0.9.0 with the packages its import chain reaches (openai 2.x, which uses the image's httpx;
# openai 3 wants httpx2). Each is pinned to one version (two of one package stop the install);
# --no-deps: what a wheel needs beyond this list is in the image.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
    # eyas
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    orjson==3.13.0 tomli-w==1.2.0 zstandard==0.25.0
    # speculators 0.9.0 and what its Eagle3DraftModel's imports reach
    speculators==0.9.0 hs-connectors==0.9.0 openai==2.54.0 jiter==0.19.0 distro==1.9.0
    sniffio==1.3.1 datasets==5.1.0 dill==0.4.1 multiprocess==0.70.19 loguru==0.7.3
    pydantic-settings==2.16.3 python-dotenv==1.2.4
)
cmd="${1:-}"
dir="${2:-.whl}"
case "$cmd" in
    download)
        mkdir -p "$dir"
        "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: \
            --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
            -d "$dir" "${WHEELS[@]}"
        ls "$dir"
        ;;
    install)
        "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile \
            --no-cache-dir --upgrade --target /tmp/site "$dir"/*.whl
        ;;
    *)
        echo "usage: tools/gpu_wheels.sh download|install [DIR]" >&2
        exit 2
        ;;
esac
