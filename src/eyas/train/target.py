"""The target's side of training: the hidden states of the layers the drafter fuses and the
final hidden state (after the final norm) per token, plus the target's input embedding and
output head. Which layers are fused is the drafter method's decision (`eyas.drafter`).

Two sources give the same tensors:
- `OnlineTarget` runs the frozen target here (transformers): for targets that fit in the
  training process (the toy, small models);
- `CapturedTarget` reads what `eyas capture` stored (through vLLM's hidden-state extraction for
  a served target such as Kimi-K2.5) and loads only the embedding, the final norm and the
  lm_head from the target checkpoint, by tensor name: no target forward runs.

Layer ids are stored as the HF `hidden_states` index: index 0 is the embedding output, index i
the residual entering layer i. vLLM's capture ids are the same numbers; SGLang's config ids are
HF index - 1 (it adds one to every id it is given): the engines' conventions and their
conversions live in `eyas.backends.<engine>.conventions`. The last layer is captured before
the final norm (the engines' convention), and the norm is applied here.
"""

from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

from eyas.drafter.names import CAPTURES_BEFORE_METHOD
from eyas.errors import EyasError
from eyas.hf_models import TargetModel, load_frozen_lm, target_model
from eyas.store.captures import StateReader


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The Llama/DeepSeek/Kimi RMSNorm, in float32."""
    x = x.float()
    return weight.float() * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


class OnlineTarget:
    def __init__(
        self,
        model_dir: str | Path,
        aux_layers: list[int],
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        trust_remote_code: bool = False,
    ):
        self.model = load_frozen_lm(model_dir, device, dtype, trust_remote_code)
        cfg = self.model.config
        self.num_layers = cfg.num_hidden_layers
        self.hidden_size = cfg.hidden_size
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.aux_layers = list(aux_layers)
        self.device = device
        self.loaded_tensors = "the whole model"

    def embedding(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach()

    def head(self) -> torch.Tensor:
        return self.model.get_output_embeddings().weight.detach()

    def device_bytes(self) -> int:
        """What this target holds on the training device: the whole model."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        return sum(t.numel() * t.element_size() for t in tensors)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, seqs) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids: [B, T] (right-padded) -> aux [B, T, n*H], final [B, T, H].

        The base model runs without the lm_head (no [T, V] logits) and without an attention
        mask: right padding never reaches a real token through causal attention, and a
        causal-only call keeps the fused attention kernels (no [T, T] mask)."""
        out = self.model.get_decoder()(
            input_ids=input_ids, output_hidden_states=True, use_cache=False
        )
        states = out.hidden_states
        if len(states) != self.num_layers + 1:  # the off-by-one that bit vLLM/TorchSpec
            raise RuntimeError(f"expected {self.num_layers + 1} hidden states, got {len(states)}")
        aux = torch.cat([states[i] for i in self.aux_layers], -1)
        return aux, out.last_hidden_state


class CapturedTarget:
    """The target's states from an `eyas capture` directory (its aux layers, then the last);
    nothing but three named tensors of the checkpoint is loaded."""

    def __init__(self, model_dir: str | Path | TargetModel, manifest: dict, device: str = "cpu"):
        # the target already read by the trainer, or its directory
        target = model_dir if isinstance(model_dir, TargetModel) else target_model(model_dir)
        model_dir = target.dir
        self.num_layers = target.num_layers
        self.hidden_size = target.hidden_size
        self.eps = target.rms_norm_eps
        self.aux_layers = list(manifest["aux_layers"])
        # the drafter method the capture was made for
        self.captured_for = manifest.get("method", CAPTURES_BEFORE_METHOD)
        found, self.loaded_tensors = target.load_tensors("embed", "norm", "head")
        missing = [k for k in ("embed", "norm", "head") if k not in found]
        if missing:
            raise EyasError(
                "bad_target",
                f"{model_dir}: no {missing} tensors found (looked for "
                f"{[target.tensor_names(r)[0] for r in missing]} in its safetensors files)",
            )
        # the embedding is read twice, by the drafter's init and by `Trainer.finish`: it stays
        # in host memory (the drafter holds its own copy on the device)
        self._embed = found["embed"]
        self._norm = found["norm"].to(device)
        self._head = found["head"].to(device)
        self.vocab_size = self._head.shape[0]
        self.device = device
        self.reader = StateReader()  # used by the reader thread only
        # One background thread reads batches ahead (the loop names them with `prefetch`) into
        # pinned host memory on CUDA; states stay in their stored dtype until on the device.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="eyas-states")
        self._pending: OrderedDict[tuple, Future] = OrderedDict()
        self._pin = device.startswith("cuda") and torch.cuda.is_available()

    def embedding(self) -> torch.Tensor:
        return self._embed

    def head(self) -> torch.Tensor:
        return self._head

    def device_bytes(self) -> int:
        """What this target holds on the training device: the head and the final norm."""
        return sum(t.numel() * t.element_size() for t in (self._head, self._norm))

    @staticmethod
    def _key(seqs) -> tuple:
        return tuple((str(s.source.shard), s.source.start, len(s.ids)) for s in seqs)

    def _read(self, seqs) -> torch.Tensor:
        """[B, T, L, H] right-padded with zeros, in the stored dtype."""
        rows = [self.reader.read(s.source, len(s.ids)) for s in seqs]
        width = max(r.shape[0] for r in rows)
        states = torch.zeros(
            (len(rows), width, *rows[0].shape[1:]), dtype=rows[0].dtype, pin_memory=self._pin
        )
        for k, r in enumerate(rows):
            states[k, : r.shape[0]] = r
        return states

    def prefetch(self, seqs) -> None:
        """Start reading a batch's states in the background (a bounded number ahead)."""
        key = self._key(seqs)
        if key not in self._pending:
            self._pending[key] = self._pool.submit(self._read, seqs)
            while len(self._pending) > 8:  # batches asked for and never trained
                self._pending.popitem(last=False)

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, seqs) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = input_ids.shape
        n_aux = len(self.aux_layers)
        future = self._pending.pop(self._key(seqs), None)
        if future is None:
            future = self._pool.submit(self._read, seqs)
        states = future.result().to(self.device, non_blocking=self._pin)
        if states.shape[1] < t:  # the method may pad the batch wider than its longest row
            states = F.pad(states, (0, 0, 0, 0, 0, t - states.shape[1]))
        states = states[:, :t]
        aux = states[:, :, :n_aux].reshape(b, t, n_aux * self.hidden_size)
        return aux, rms_norm(states[:, :, n_aux], self._norm, self.eps)
