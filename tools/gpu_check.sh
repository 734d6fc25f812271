#!/usr/bin/env bash
# What a CPU machine cannot prove, on one NVIDIA GPU. One line per check:
#
#   CHECK <name>: PASS|FAIL|SKIP <detail>
#
#   tools/gpu_check.sh                      # installs eyas, vLLM and SGLang (network needed)
#   tools/gpu_check.sh --wheels DIR         # offline: every wheel it needs is in DIR
#   tools/gpu_check.sh --work DIR           # keep the work folder (toys, drafters, logs)
#   tools/gpu_check.sh --skip-sglang        # vLLM only
#
# Checks: CUDA; the toy targets (tiny, and the Kimi-K2.5-shaped one) and data generated on the
# GPU; a bf16 training step; FSDP2 on NCCL (every GPU; world size 1 on a one-GPU machine, where
# NCCL allows one rank per device); vLLM's GPU build serving eyas's vLLM exports (EAGLE-3,
# EAGLE-3.1, DFlash on the tiny toy; EAGLE-3 on the Kimi-shaped toy: an MLA target with an MHA
# draft, whose KV pages vLLM must unify) and measuring acceptance against a baseline server;
# capture through vLLM's GPU path with eyas's connector, against transformers' states; SGLang
# serving eyas's SGLang export (if SGLang installs). The engines get their own venvs (each pins
# its own torch); eyas reuses the machine's CUDA torch (`--system-site-packages`).
#
# Sized for under ten minutes on one H100/H200 once the engines are installed (their install
# is a download of a few GB and is timed separately). Exit 1 if any check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK="" WHEELS="" SKIP_SGLANG=0
while [ $# -gt 0 ]; do
    case "$1" in
        --work) WORK="$2"; shift 2 ;;
        --wheels) WHEELS="$(cd "$2" && pwd)"; shift 2 ;;
        --skip-sglang) SKIP_SGLANG=1; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
WORK="${WORK:-$(mktemp -d /tmp/eyas-gpu-check.XXXXXX)}"
mkdir -p "$WORK"
PY="${PYTHON:-python3}"
PIP_SRC=()
[ -n "$WHEELS" ] && PIP_SRC=(--no-index --find-links "$WHEELS")

say() { echo "CHECK $1: $2"; }

venv() {  # venv DIR [--system-site-packages]
    [ -x "$1/bin/python" ] || "$PY" -m venv "${@:2}" "$1" || return 1
    "$1/bin/pip" install -q "${PIP_SRC[@]}" --upgrade pip >/dev/null 2>&1 || true
}

# eyas: the machine's CUDA torch, eyas without its torch pin, then what is missing
t0=$(date +%s)
EYAS="$WORK/eyas-venv"
if venv "$EYAS" --system-site-packages \
    && "$EYAS/bin/pip" install -q "${PIP_SRC[@]}" --no-deps -e "$ROOT" \
    && "$EYAS/bin/pip" install -q "${PIP_SRC[@]}" "transformers>=5.16,<5.25" tokenizers \
        safetensors pyarrow "pydantic>=2.6" typer rich aiohttp orjson jinja2 numpy tiktoken \
        tomli-w >"$WORK/pip-eyas.log" 2>&1 \
    && "$EYAS/bin/python" -c "import torch, eyas.cli; assert torch.cuda.is_available()"; then
    say install_eyas "PASS $(( $(date +%s) - t0 ))s"
else
    say install_eyas "FAIL see $WORK/pip-eyas.log (a CUDA torch must be importable by $PY)"
    exit 1
fi

VLLM_PY="" SGLANG_PY=""
t0=$(date +%s)
if venv "$WORK/vllm-venv" && "$WORK/vllm-venv/bin/pip" install -q "${PIP_SRC[@]}" \
    "vllm==0.33.0" >"$WORK/pip-vllm.log" 2>&1; then
    VLLM_PY="$WORK/vllm-venv/bin/python"
    say install_vllm "PASS vllm 0.33.0 in $(( $(date +%s) - t0 ))s"
else
    say install_vllm "SKIP vllm==0.33.0 did not install (see $WORK/pip-vllm.log)"
fi
if [ "$SKIP_SGLANG" = 0 ]; then
    t0=$(date +%s)
    if venv "$WORK/sglang-venv" && "$WORK/sglang-venv/bin/pip" install -q "${PIP_SRC[@]}" \
        "sglang[all]==0.5.23" >"$WORK/pip-sglang.log" 2>&1; then
        SGLANG_PY="$WORK/sglang-venv/bin/python"
        say install_sglang "PASS sglang 0.5.23 in $(( $(date +%s) - t0 ))s"
    else
        say install_sglang "SKIP sglang==0.5.23 did not install (see $WORK/pip-sglang.log)"
    fi
fi

exec "$EYAS/bin/python" "$ROOT/tools/gpu_check.py" --work "$WORK" \
    ${VLLM_PY:+--vllm-python "$VLLM_PY"} ${SGLANG_PY:+--sglang-python "$SGLANG_PY"}
