# Shared by the peer-environment scripts: a fresh venv with pip upgraded and the CPU torch
# wheel (an unpinned torch would pull a multi-GB CUDA build). Source it, then call
#   fresh_venv DIR
fresh_venv() {
    local venv="$1" py="${PYTHON:-python3}"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q torch==2.13.0
}
