#!/usr/bin/env bash
# bench/bench_train_gpu.py on a GPU machine without a network, in one command (under 8 minutes on
# one H200: the carried wheels installed, then the cases that fit 440 s).
#
#   here, once:   tools/gpu_wheels.sh download        # py3.12 wheels into .whl/ (git-ignored)
#   there:        bash tools/gpu_bench.sh             # the device tool: carry [".whl"]
#
# Writes $OUT/train_gpu.json (the device tool's output folder; else bench/results/), which the
# next session copies to bench/results/train_gpu.json before `python bench/benchmarks_doc.py`.
# Arguments go to the bench: `--fill bench/results/train_gpu.json` keeps the cases measured
# before and runs the rest; `--profile "$OUT"` adds an operator table per eyas case at 16k.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
bash tools/gpu_wheels.sh install .whl
export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python3 bench/bench_train_gpu.py --out "${OUT:-bench/results}/train_gpu.json" "$@"
