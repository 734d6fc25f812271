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

from pathlib import Path

import torch

from eyas.errors import EyasError
from eyas.hf_models import load_frozen_lm, target_model
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

    def __init__(self, model_dir: str | Path, manifest: dict, device: str = "cpu"):
        target = target_model(model_dir)
        self.num_layers = target.num_layers
        self.hidden_size = target.hidden_size
        self.eps = target.rms_norm_eps
        self.aux_layers = list(manifest["aux_layers"])
        # the drafter method the capture was made for (captures before `--method`: EAGLE-3)
        self.captured_for = manifest.get("method", "eagle3")
        found, self.loaded_tensors = target.load_tensors("embed", "norm", "head")
        missing = [k for k in ("embed", "norm", "head") if k not in found]
        if missing:
            raise EyasError(
                "bad_target",
                f"{model_dir}: no {missing} tensors found (looked for "
                f"{[target.tensor_names(r)[0] for r in missing]} in its safetensors files)",
            )
        self._embed = found["embed"].to(device)
        self._norm = found["norm"].to(device)
        self._head = found["head"].to(device)
        self.vocab_size = self._head.shape[0]
        self.device = device
        self.reader = StateReader()

    def embedding(self) -> torch.Tensor:
        return self._embed

    def head(self) -> torch.Tensor:
        return self._head

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, seqs) -> tuple[torch.Tensor, torch.Tensor]:
        b, t = input_ids.shape
        n_aux = len(self.aux_layers)
        states = torch.zeros(b, t, n_aux + 1, self.hidden_size)
        for r, seq in enumerate(seqs):
            n = len(seq.ids)
            states[r, :n] = self.reader.read(seq.source, n).float()
        states = states.to(self.device)
        aux = states[:, :, :n_aux].reshape(b, t, n_aux * self.hidden_size)
        return aux, rms_norm(states[:, :, n_aux], self._norm, self.eps)
