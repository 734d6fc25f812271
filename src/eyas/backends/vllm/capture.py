"""Hidden-state capture through vLLM: the capture flags and environment
(`VLLMServer.capture_launch` adds them to a server eyas starts), and reading the files it
writes.

The server runs the `extract_hidden_states` speculative method with eyas's KV connector
(`eyas/backends/vllm/plugin/eyas_hidden_states.py`, a standalone file the server imports from
its PYTHONPATH). Each finished request's `kv_transfer_params.hidden_states_path` names a
safetensors file with `hidden_states` [T, L, H] and `token_ids` [T]; the connector holds
`LOCK_EX` on `path.lock` until the write ends (vLLM's `ExampleHiddenStatesConnector`).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from safetensors import SafetensorError

from eyas.backends.reasons import BackendError

if TYPE_CHECKING:
    import torch

PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"
CONNECTOR = {
    "kv_connector": "EyasHiddenStatesConnector",
    "kv_connector_module_path": "eyas_hidden_states",
}
# A file read before its write ended (shared storage whose locks are not coherent across
# hosts) raises SafetensorError; it is read again after these pauses before the request is
# given up as `hidden_states_torn` (and retried by the pool).
TORN_REREAD_S = (0.1, 0.3, 1.0)


def capture_args(layers: list[int], storage_dir: Path) -> list[str]:
    """Server flags for hidden-state extraction: `layers` are the aux ids then the last."""
    spec = {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": layers}},
    }
    kv = {
        **CONNECTOR,
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": str(storage_dir)},
    }
    return [
        "--speculative-config",
        orjson.dumps(spec).decode(),
        "--kv-transfer-config",
        orjson.dumps(kv).decode(),
        # every token's state must come from this request's own prefill
        "--no-enable-prefix-caching",
    ]


def plugin_env() -> dict[str, str]:
    """PYTHONPATH for a server that loads the eyas connector."""
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))
    }


def _load(path: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # torch: not at CLI start

    lock = path + ".lock"
    if os.path.exists(lock):
        with open(lock) as f:
            fcntl.flock(f, fcntl.LOCK_SH)  # waits for the server's write to finish
            return load_file(path)
    return load_file(path)


def _remove(path: str) -> None:
    for p in (path + ".lock", path):
        if os.path.exists(p):
            os.remove(p)


def read_capture_file(path: str) -> dict[str, torch.Tensor]:
    """Load (and delete) one capture file. A torn or partial file is read again a few times,
    then `hidden_states_torn`; a missing or unreadable one is `hidden_states_unreadable`."""
    for pause in (*TORN_REREAD_S, None):
        try:
            data = _load(path)
            break
        except SafetensorError as exc:
            if pause is None:
                _remove(path)
                raise BackendError("hidden_states_torn", f"{path}: {exc}") from exc
            time.sleep(pause)
        except OSError as exc:
            raise BackendError(
                "hidden_states_unreadable",
                f"{path}: {exc} (the server's shared_storage_path must be readable here)",
            ) from exc
    _remove(path)
    for key in ("hidden_states", "token_ids"):
        if key not in data:
            raise BackendError("hidden_states_torn", f"{path} holds no {key!r}")
    return data
