"""A vLLM KV connector that writes each request's hidden states to disk, on CPU and GPU.

Standalone on purpose (no eyas imports): put this folder on the vLLM server's PYTHONPATH and
load it by module path. It is vLLM's `ExampleHiddenStatesConnector` (used with the
`extract_hidden_states` speculative method, vLLM PR #33736) with one change: the stock
connector copies device-to-host through pinned memory, CUDA streams and events, so on a CPU
engine it dies with "pin_memory=True requires a CUDA or other accelerator backend". When the
cache lives on the CPU this one slices it synchronously and hands the write to the same
thread pool; on a GPU it keeps the stock asynchronous copy.

    python -m vllm.entrypoints.openai.api_server --model TARGET ... \\
      --speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58, 61]}}}' \\
      --kv-transfer-config '{"kv_connector": "EyasHiddenStatesConnector",
        "kv_connector_module_path": "eyas_hidden_states", "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": "/shared/eyas-capture"}}'

Each finished request's `kv_transfer_params.hidden_states_path` names a safetensors file with
`hidden_states` [T, n_layers, H] and `token_ids` [T]; a `.lock` beside it is held until the
write ends.
"""

from __future__ import annotations

import fcntl
import os
from functools import partial

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)


class _Done:
    """A completed copy: what `get_finished` polls in place of a CUDA event."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class EyasHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending: PendingSave) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        if self._kv_cache.is_cuda:
            return super()._submit_async_write(pending)
        block_ids = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(self._block_size, dtype=torch.long)
        slots = (offsets[None, :] + block_ids[:, None] * self._block_size).flatten()
        num_tokens = pending.token_ids.shape[0]
        # clone: the blocks are freed and reused once this request is reported done
        states = extract_from_kv_cache(self._kv_cache, slots, num_tokens).clone()
        tensors = {"hidden_states": states, "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        done = _Done()
        future = self._executor.submit(
            self._write_tensors, tensors, done, pending.filename, lock_fd
        )
        self._req_copy_events[pending.req_id] = done
        self._req_futures[pending.req_id] = future
        future.add_done_callback(partial(self._on_write_done, pending.req_id))
