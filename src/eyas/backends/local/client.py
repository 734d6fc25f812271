"""In-process transformers: batched generation (the embedded default) and hidden-state
capture (docs/architecture.md).

Requests arriving concurrently are grouped into batches by (max_new_tokens, sampling) and run
in a worker thread, so the event loop keeps serving while the model computes. Capture runs one
sequence at a time in a worker thread; the final layer is taken before the final norm (a hook
on the norm's input), as the engines do.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from eyas.backends.base import BackendError, BackendSettings, Generation, GenRequest, Progress
from eyas.backends.local.options import LocalOptions
from eyas.hf_models import load_frozen_lm


def generate_batch(*args: Any, **kwargs: Any) -> Any:
    """`hf_generate.generate_batch`, imported on first use (torch loads with it, not at the
    CLI's start)."""
    from eyas.backends.local.hf_generate import generate_batch as run

    return run(*args, **kwargs)


class LocalBackend:
    name = "local"
    lossy = False
    remote = False
    operations = frozenset({"generate", "capture"})

    def __init__(
        self,
        model_dir: str | Path,
        stop_token_ids: list[int],
        pad_token_id: int,
        batch_size: int = 16,
        device: str | None = None,
        trust_remote_code: bool = False,
        capture_layers: list[int] | None = None,
    ):
        import torch

        self.url = f"local:{model_dir}"
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.model = load_frozen_lm(model_dir, self.device, dtype, trust_remote_code)
        self.stop_token_ids = stop_token_ids
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size
        self.capture_layers = capture_layers
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None
        self._forward_lock = threading.Lock()
        self._pre_norm: list | None = None

    @classmethod
    def from_settings(
        cls, settings: BackendSettings, options: LocalOptions, *, url, session
    ) -> LocalBackend:
        if settings.model_dir is None:
            raise ValueError("the local engine needs settings.model_dir")
        return cls(
            settings.model_dir,
            settings.stop_token_ids,
            settings.pad_token_id,
            settings.max_in_flight or 16,
            settings.device,
            settings.trust_remote_code,
            settings.capture_layers,
        )

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            first = await self._queue.get()
            batch = [first]
            await asyncio.sleep(0)  # let concurrent submitters enqueue
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            groups: dict[tuple, list] = {}
            for item in batch:
                req = item[0]
                key = (req.max_new_tokens, tuple(sorted(req.sampling.items())))
                groups.setdefault(key, []).append(item)
            for items in groups.values():
                await self._run_group(items)

    async def _run_group(self, items: list) -> None:
        """Generate one batch; an out-of-memory error retries it as two halves, and any other
        failure fails these requests as a BackendError (the run goes on)."""
        req0 = items[0][0]
        start = time.perf_counter()
        try:
            outs = await asyncio.to_thread(
                generate_batch,
                self.model,
                [r.prompt_ids for r, _ in items],
                self.stop_token_ids,
                req0.max_new_tokens,
                self.pad_token_id,
                float(req0.sampling.get("temperature") or 0.0),
                float(req0.sampling.get("top_p") or 1.0),
                req0.sampling.get("seed"),
            )
        except Exception as exc:
            if _out_of_memory(exc) and len(items) > 1:
                self._release_memory()
                half = len(items) // 2
                await self._run_group(items[:half])
                await self._run_group(items[half:])
                return
            error = BackendError(
                "local_out_of_memory" if _out_of_memory(exc) else "local_error",
                f"{type(exc).__name__}: {exc}",
            )
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(error)
            return
        elapsed = time.perf_counter() - start
        for (_, fut), out in zip(items, outs):
            if not fut.done():
                fut.set_result(
                    Generation(
                        out.output_ids,
                        out.finish_reason,
                        out.matched_stop,
                        {"latency_s": elapsed, "batch": len(items)},
                    )
                )

    def _release_memory(self) -> None:
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()

    async def generate(self, request: GenRequest) -> Generation:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run())
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((request, fut))
        return await fut

    def _forward(self, ids: list[int]):
        """[T, L, H] states of `capture_layers` for one sequence (HF `hidden_states` indices;
        the number of layers means the last layer's output before the final norm)."""
        import torch

        with self._forward_lock, torch.no_grad():
            decoder = self.model.get_decoder()
            if self._pre_norm is None:
                self._pre_norm = []
                decoder.norm.register_forward_pre_hook(
                    lambda _m, args: self._pre_norm.append(args[0])
                )
            self._pre_norm.clear()
            out = decoder(
                input_ids=torch.tensor([ids], device=self.device),
                output_hidden_states=True,
                use_cache=False,
            )
            last = len(out.hidden_states) - 1
            states = [
                self._pre_norm[0] if i == last else out.hidden_states[i]
                for i in self.capture_layers or []
            ]
            return torch.stack([s[0] for s in states], 1).cpu()  # [T, L, H]

    async def capture(self, request_id: str, ids: list[int]):
        if not self.capture_layers:
            raise ValueError("the local engine captures only with settings.capture_layers")
        return await asyncio.to_thread(self._forward, ids)

    async def progress(self) -> Progress:
        return Progress(alive=True)  # the model runs in this process: waiting is working

    async def ready(self, timeout_s: float) -> dict[str, Any]:
        return {"url": self.url, "device": self.device, "batch_size": self.batch_size}

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()


def _out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()
