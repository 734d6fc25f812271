"""DFlash2 as a `DraftMethod`: DFlash's (anchors, mask token, fused layers, target embedding
and head) with its own model, loss, selector decoding and layouts."""

from __future__ import annotations

from dataclasses import asdict
from typing import Protocol

import torch

from eyas.backends.vllm import conventions as vllm
from eyas.drafter.dflash.method import DFlashMethod, DFlashTrainSettings
from eyas.drafter.dflash2 import export as layouts
from eyas.drafter.dflash2.decode import DFlash2Proposer
from eyas.drafter.dflash2.model import DFlash2Config, DFlash2Drafter
from eyas.drafter.dflash2.options import DFlash2Options
from eyas.drafter.dflash2.train import block_loss
from eyas.errors import EyasError
from eyas.hf_models import TargetModel


class DFlash2TrainSettings(DFlashTrainSettings, Protocol):
    """What DFlash2's hooks read: DFlash's and its own options (`options.py`)."""

    dflash2: DFlash2Options


class DFlash2Method(DFlashMethod[DFlash2TrainSettings]):
    name = "dflash2"

    # -- config ----------------------------------------------------------------------------

    def build_config(
        self,
        *,
        target: TargetModel,
        train_cfg: DFlash2TrainSettings,
        aux_layers: list[int],
        vocab: dict,
        max_positions: int,
    ) -> DFlash2Config:
        base = super().build_config(
            target=target,
            train_cfg=train_cfg,
            aux_layers=aux_layers,
            vocab=vocab,
            max_positions=max_positions,
        )
        keys = {k: int(getattr(train_cfg.dflash2, k)) for k in vllm.DFLASH2_KEYS}
        try:
            return DFlash2Config(**asdict(base), **keys)
        except ValueError as exc:  # a group size that does not divide the width, ...
            raise EyasError("bad_flag", f"dflash2: {exc}") from exc

    def config_from_dict(self, raw: dict) -> DFlash2Config:
        fields = DFlash2Config.__dataclass_fields__
        return DFlash2Config(**{k: v for k, v in raw.items() if k in fields})

    def build_model(self, config: DFlash2Config) -> DFlash2Drafter:
        return DFlash2Drafter(config)

    # -- training --------------------------------------------------------------------------

    def block_loss(
        self, raw_model, states, prepared, teacher, normalizer, train_cfg: DFlash2TrainSettings
    ):
        """DFlash's slot loss plus the selector's (`eyas.drafter.dflash2.train`)."""
        return block_loss(
            states,
            teacher,
            prepared.input_ids,
            prepared.supervised,
            prepared.extra["anchors"],
            prepared.extra["valid"],
            normalizer,
            raw_model.candidate_selector,
            selector_alpha=train_cfg.dflash2.selector_loss_alpha,
            weighting=train_cfg.dflash.weighting,
            gamma=train_cfg.dflash.gamma,
            alpha=train_cfg.dflash.dpace_alpha,
            chunk=train_cfg.chunk_len,
        )

    # -- decoding --------------------------------------------------------------------------

    def proposer(self, model: DFlash2Drafter) -> DFlash2Proposer:
        return DFlash2Proposer(model)

    # -- export, loading and validation ----------------------------------------------------

    def _zlab_layout(self, model, *, target, target_name, speculative_tokens, engine_version):
        """z-lab's `DFlash2DraftModel` (SGLang, from the version that loads it)."""
        config = layouts.zlab_config(model.config, target, engine_version)
        return config, layouts.exported_tensors(model)

    def _speculators_layout(
        self, model, *, target, target_name, speculative_tokens, engine_version
    ):
        """speculators `dflash2`, which vLLM loads."""
        config = layouts.speculators_config(model.config, target, target_name, speculative_tokens)
        return config, layouts.exported_tensors(model)

    def reads(self, config: dict) -> bool:
        return layouts.dflash.is_dflash2(config)

    def read_export(self, config: dict) -> DFlash2Config:
        return layouts.read_config(config)

    def expected_tensors(self, config: dict) -> dict[str, tuple[int, ...]]:
        return layouts.expected_tensors(config)

    def serving_refusal(self, engine: str) -> str | None:
        refusal = {"vllm": self._vllm_cpu_refusal}.get(engine)
        return refusal() if refusal else None

    def _vllm_cpu_refusal(self) -> str | None:
        """vLLM drafts with the selector only in its V2 model runner, which needs Triton; the
        CPU build eyas starts without a GPU refuses the drafter (`vllm.DFLASH2_CPU_REFUSAL`),
        so eyas refuses first. Its loader takes the export all the same (`export check`)."""
        if torch.cuda.is_available():
            return None
        return (
            "vLLM serves DFlash2 only with its V2 model runner, which needs Triton (a GPU "
            f"build): the CPU build refuses it ('{vllm.DFLASH2_CPU_REFUSAL}', "
            "vllm/config/vllm.py). Evaluate it offline (no --backend), or serve it on a "
            "GPU vLLM and pass --url"
        )
