"""The frozen target, run online in the training loop: three auxiliary hidden states and the
next-token distribution, captured with transformers (anchors.md #22: no server internals).

Layer ids use the HF `hidden_states` index, which is also the SGLang/vLLM capture id: index 0
is the embedding output, index i the residual entering layer i (anchors.md §4.1). The ids are
written into the export so serving captures the same layers (anchors.md #42).
"""

from __future__ import annotations

from pathlib import Path

import torch

from eyas.errors import EyasError
from eyas.hf_models import load_frozen_lm


def default_aux_layers(num_layers: int) -> list[int]:
    """SGLang's default capture ids [2, N//2, N-3]; for very shallow targets, where those
    collide, three distinct evenly spread ids [1, N//2, N-1]."""
    ids = [2, num_layers // 2, num_layers - 3]
    if len(set(ids)) == 3 and all(1 <= i <= num_layers - 1 for i in ids):
        return ids
    ids = [1, max(2, num_layers // 2), num_layers - 1]
    if len(set(ids)) != 3:
        raise ValueError(f"a {num_layers}-layer target is too shallow for EAGLE-3's 3 layers")
    return ids


def check_aux_layers(aux_layers: list[int], num_layers: int) -> None:
    """Ids in 1..N-1: id N is post-norm in transformers but pre-norm in SGLang and vLLM, so a
    drafter trained on it would be served a different tensor; id 0 is the bare embedding."""
    if len(aux_layers) != 3 or any(not 1 <= i <= num_layers - 1 for i in aux_layers):
        raise EyasError(
            "bad_aux_layers",
            f"aux layer ids {aux_layers}: EAGLE-3 fuses 3 layers with ids in 1..{num_layers - 1}",
        )


class TargetModel:
    def __init__(
        self,
        model_dir: str | Path,
        aux_layers: list[int] | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        trust_remote_code: bool = False,
    ):
        self.model = load_frozen_lm(model_dir, device, dtype, trust_remote_code)
        cfg = self.model.config
        self.num_layers = cfg.num_hidden_layers
        self.hidden_size = cfg.hidden_size
        self.vocab_size = self.model.get_output_embeddings().weight.shape[0]
        self.aux_layers = aux_layers or default_aux_layers(self.num_layers)
        check_aux_layers(self.aux_layers, self.num_layers)
        self.device = device

    def input_embedding(self) -> torch.Tensor:
        return self.model.get_input_embeddings().weight.detach()

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        """input_ids, attention_mask: [B, T] -> aux [B, T, 3*H], logits [B, T, V]."""
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            output_hidden_states=True,
            use_cache=False,
        )
        states = out.hidden_states
        if len(states) != self.num_layers + 1:  # the off-by-one that bit vLLM/TorchSpec
            raise RuntimeError(f"expected {self.num_layers + 1} hidden states, got {len(states)}")
        aux = torch.cat([states[i] for i in self.aux_layers], -1)
        if aux.shape[-1] != 3 * self.hidden_size:
            raise RuntimeError(f"aux hidden width {aux.shape[-1]} != 3 x {self.hidden_size}")
        return aux, out.logits
