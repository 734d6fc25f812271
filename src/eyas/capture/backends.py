"""Where target hidden states come from: a vLLM server with hidden-state extraction (the
production path for a served target), or transformers in this process (tests, small targets).
Both return, for one token sequence, the [T, 4, H] states of the three aux layers and of the
final layer before the final norm."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import torch
from safetensors.torch import load_file

from eyas.backends.base import BackendError, json_headers, post_bytes, wait_http_ready

PLUGIN_DIR = Path(__file__).parent / "vllm_plugin"
CONNECTOR = {
    "kv_connector": "EyasHiddenStatesConnector",
    "kv_connector_module_path": "eyas_hidden_states",
}


def vllm_capture_args(layers: list[int], storage_dir: Path, max_model_len: int) -> list[str]:
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
        "--max-model-len",
        str(max_model_len),
    ]


def plugin_env() -> dict[str, str]:
    """PYTHONPATH for a server that loads the eyas connector."""
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN_DIR), os.environ.get("PYTHONPATH")]))
    }


def _read_locked(path: str) -> dict[str, torch.Tensor]:
    """Wait for the server's write to finish (it holds LOCK_EX on `path.lock`), then load."""
    lock = path + ".lock"
    if os.path.exists(lock):
        with open(lock) as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            data = load_file(path)
    else:
        data = load_file(path)
    for p in (lock, path):
        if os.path.exists(p):
            os.remove(p)
    return data


class VLLMCapture:
    """POST /v1/completions with the full token sequence as the prompt and one new token; the
    connector writes the prompt's states to shared storage and the response names the file."""

    name = "vllm"

    def __init__(
        self,
        url: str,
        session: aiohttp.ClientSession,
        timeout_s: float = 600.0,
        api_key: str | None = None,
    ):
        self.url = url.rstrip("/")
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.headers = json_headers(api_key)
        self.model: str | None = None

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        await wait_http_ready(self.session, self.url, ("/health", "/v1/models"), timeout_s)
        async with self.session.get(self.url + "/v1/models", headers=self.headers) as r:
            served = [m["id"] for m in orjson.loads(await r.read()).get("data", [])]
        self.model = served[0] if served else None
        return {"url": self.url, "model": self.model}

    async def capture(self, request_id: str, ids: list[int]) -> torch.Tensor:
        payload = {
            "model": self.model,
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        body = await post_bytes(
            self.session,
            self.url + "/v1/completions",
            orjson.dumps(payload),
            self.headers,
            self.timeout,
        )
        try:
            obj = orjson.loads(body)
            path = (obj.get("kv_transfer_params") or {})["hidden_states_path"]
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            raise BackendError(
                "no_hidden_states",
                "the response names no hidden_states_path: is the server running with "
                "--speculative-config extract_hidden_states and the eyas connector?",
                False,
            ) from exc
        try:
            data = await asyncio.to_thread(_read_locked, path)
        except OSError as exc:
            raise BackendError(
                "hidden_states_unreadable",
                f"{path}: {exc} (the server's shared_storage_path must be readable here)",
                True,
            ) from exc
        if data["token_ids"].tolist() != list(ids):
            raise BackendError(
                "prompt_mismatch", f"{path}: token ids differ from those sent", False
            )
        return data["hidden_states"]

    async def close(self) -> None:
        return None


class LocalCapture:
    """transformers in this process, one sequence at a time in a worker thread. The final
    layer is taken before the final norm (a hook on the norm's input), as the engines do."""

    name = "local"

    def __init__(self, model_dir: str | Path, layers: list[int], trust_remote_code: bool = False):
        from eyas.hf_models import load_frozen_lm

        self.model = load_frozen_lm(model_dir, "cpu", torch.float32, trust_remote_code)
        self.layers = layers
        self._lock = threading.Lock()
        decoder = self.model.get_decoder()
        self._pre_norm: list[torch.Tensor] = []
        decoder.norm.register_forward_pre_hook(lambda _m, args: self._pre_norm.append(args[0]))

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        return {"url": "local", "device": "cpu"}

    def _forward(self, ids: list[int]) -> torch.Tensor:
        with self._lock, torch.no_grad():
            self._pre_norm.clear()
            out = self.model.get_decoder()(
                input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False
            )
            last = self.model.config.num_hidden_layers
            states = [self._pre_norm[0] if i == last else out.hidden_states[i] for i in self.layers]
            return torch.stack([s[0] for s in states], 1)  # [T, L, H]

    async def capture(self, request_id: str, ids: list[int]) -> torch.Tensor:
        return await asyncio.to_thread(self._forward, ids)

    async def close(self) -> None:
        return None
