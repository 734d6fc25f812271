"""EAGLE-3 as a `DraftMethod`; `eagle3.1` is the same method with the two normalisation fixes
(`fc_norm`, `norm_output`) switched on."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn

from eyas.drafter.eagle3 import export as layouts
from eyas.drafter.eagle3.decode import Eagle3Proposer
from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.drafter.eagle3.options import Eagle3Options
from eyas.drafter.eagle3.train import step_mask, ttt_loss, ttt_loss_fast
from eyas.drafter.fast_path import fast_path_on, loss_compiled, sharded
from eyas.drafter.loss import StepStats, Teacher
from eyas.drafter.memory import checkpointing_on
from eyas.drafter.method import (
    DrafterLoadError,
    DraftMethod,
    LayoutWriter,
    MethodTrainSettings,
    Prepared,
    SpeculativeConfigWriter,
    check_layer_ids,
    target_tensor,
)
from eyas.drafter.mla import MLAShape, is_mla_target
from eyas.drafter.shape import drafter_shape
from eyas.errors import EyasError
from eyas.hf_models import TargetModel


class Eagle3TrainSettings(MethodTrainSettings, Protocol):
    """What EAGLE-3's hooks read: the shared settings and its own options (`options.py`)."""

    eagle3: Eagle3Options


class Eagle3Method(DraftMethod[Eagle3TrainSettings]):
    exact_step_flops = True
    fast_path_measured = True

    def __init__(self, name: str, *, v31: bool):
        self.name = name  # type: ignore[misc]
        self.v31 = v31

    # -- config ----------------------------------------------------------------------------

    def default_aux_layers(
        self, num_layers: int, train_cfg: Eagle3TrainSettings | None = None
    ) -> list[int]:
        """SGLang's default capture layers [2, N//2, N-3] (HF indices: what SGLang captures
        when its config names no ids); for very shallow targets, where those collide, three
        distinct evenly spread ids [1, N//2, N-1]."""
        ids = [2, num_layers // 2, num_layers - 3]
        if len(set(ids)) == 3 and all(1 <= i <= num_layers - 1 for i in ids):
            return ids
        ids = [1, max(2, num_layers // 2), num_layers - 1]
        if len(set(ids)) != 3:
            raise EyasError(
                "bad_aux_layers",
                f"a {num_layers}-layer target is too shallow for EAGLE-3's 3 layers",
            )
        return ids

    def attentions(self) -> tuple[str, ...]:
        return ("mha", "mla")

    def draft_layers_problem(self, draft_layers: int | None) -> str | None:
        if (draft_layers or 1) != 1:
            return "EAGLE-3 drafters have one decoder layer (draft_layers = 1)"
        return None

    def check_aux_layers(self, aux_layers: list[int], num_layers: int) -> None:
        if len(aux_layers) != 3:
            raise EyasError(
                "bad_aux_layers", f"aux layer ids {aux_layers}: EAGLE-3 fuses exactly 3 layers"
            )
        check_layer_ids(aux_layers, num_layers, what="EAGLE-3")

    def build_config(
        self,
        *,
        target: TargetModel,
        train_cfg: Eagle3TrainSettings,
        aux_layers: list[int],
        vocab: dict,
        max_positions: int,
    ) -> Eagle3Config:
        shape = drafter_shape(
            target,
            num_attention_heads=train_cfg.num_attention_heads,
            head_dim=train_cfg.head_dim,
            intermediate_size=train_cfg.intermediate_size,
        )
        attention = getattr(train_cfg, "attention", None) or (
            "mla" if is_mla_target(target) else "mha"
        )
        mla = MLAShape.of_target(target) if attention == "mla" else None
        why = shape.why
        if mla is not None:
            why = (
                f"mla: {shape.num_attention_heads} heads, the target's q_lora "
                f"{mla.q_lora_rank}, kv_lora {mla.kv_lora_rank}, nope/rope/v "
                f"{mla.qk_nope_head_dim}/{mla.qk_rope_head_dim}/{mla.v_head_dim}; "
                + why.split("; ", 1)[-1]
            )
        return Eagle3Config(
            hidden_size=target.hidden_size,
            intermediate_size=shape.intermediate_size,
            num_attention_heads=shape.num_attention_heads,
            num_key_value_heads=shape.num_key_value_heads,
            head_dim=shape.head_dim,
            vocab_size=target.vocab_size,
            draft_vocab_size=vocab["draft_vocab_size"],
            target_hidden_size=target.hidden_size,
            aux_layer_ids=list(aux_layers),
            max_position_embeddings=max_positions,
            rms_norm_eps=target.rms_norm_eps,
            rope_theta=target.rope_theta,
            rope_scaling=target.rope_scaling,
            target_num_layers=target.num_layers,
            fc_norm=self.v31,
            norm_output=self.v31,
            attention=attention,
            draft_head=train_cfg.eagle3.draft_head,
            norm_before_residual=train_cfg.eagle3.norm_before_residual,
            **(asdict(mla) if mla is not None else {}),
            extra={"shape": why},
        )

    def config_from_dict(self, raw: dict) -> Eagle3Config:
        fields = Eagle3Config.__dataclass_fields__
        return Eagle3Config(**{k: v for k, v in raw.items() if k in fields})

    def build_model(self, config: Eagle3Config) -> Eagle3Drafter:
        return Eagle3Drafter(config)

    def init_from_target(self, model, *, embedding, head, vocab) -> None:
        """The target's embedding, the draft vocabulary, and the draft head as the target's
        head rows of the draft ids (what speculators' `load_verifier_weights` does): trained
        from there, or kept (`draft_head = "frozen"`)."""
        with torch.no_grad():
            model.embed_tokens.weight.copy_(embedding.float())
            model.d2t.copy_(vocab["d2t"])
            model.t2d.copy_(vocab["t2d"])
            rows = model.draft_to_target().to(head.device)
            model.lm_head.weight.copy_(head.index_select(0, rows).float())

    # -- training --------------------------------------------------------------------------

    def num_slots(self, config: Any, train_cfg: Eagle3TrainSettings) -> int:
        return train_cfg.ttt

    def prepare(
        self, model, input_ids, supervised, *, train_cfg: Eagle3TrainSettings, seeds
    ) -> Prepared:
        counts = torch.stack([step_mask(supervised, k).sum() for k in range(train_cfg.ttt)])
        return Prepared(input_ids, supervised, counts.to("cpu", torch.float64), {})

    def loss(
        self,
        model: nn.Module,
        raw_model: nn.Module,
        prepared: Prepared,
        *,
        aux: torch.Tensor,
        teacher: Teacher,
        normalizer: list[float],
        train_cfg: Eagle3TrainSettings,
    ) -> tuple[torch.Tensor, list[StepStats]]:
        ids = prepared.input_ids
        # index j reads x_{j+1} and the target's h_j
        inputs = torch.cat([ids[:, 1:], ids[:, -1:]], 1)
        ac = checkpointing_on(train_cfg, ids.numel())
        fast = fast_path_on(train_cfg, ids.device)
        # "compiled": the fast path with its elementwise work compiled (the layer's here, the loss's below)
        mode = "compiled" if fast and loss_compiled(train_cfg) else fast
        step_hidden = model(inputs, aux, train_cfg.ttt, checkpoint_layers=ac, fast=mode)
        head = raw_model.lm_head.weight
        args = (
            step_hidden,
            teacher,
            prepared.supervised,
            head if fast and not sharded(head) else raw_model.lm_head,
            raw_model.draft_to_target(),
            raw_model.t2d,
            normalizer,
            train_cfg.loss_decay,
            train_cfg.chunk_len,
        )
        if fast and not sharded(head):
            return ttt_loss_fast(*args, compiled=loss_compiled(train_cfg))
        return ttt_loss(*args)

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        # the decoder layer is its own unit so its all-gather overlaps the root's; the loss
        # calls the head chunk by chunk, outside forward (a frozen head is in no unit)
        return [model.midlayer] + ([model.lm_head] if model.lm_head.weight.requires_grad else [])

    # -- decoding --------------------------------------------------------------------------

    def proposer(self, model: Eagle3Drafter) -> Eagle3Proposer:
        return Eagle3Proposer(model)

    def tree_proposer(self, model: Eagle3Drafter) -> Eagle3Proposer:
        return Eagle3Proposer(model)

    # -- export, loading and validation ----------------------------------------------------

    def layouts(self) -> dict[str, LayoutWriter]:
        return {"sglang": _sglang_layout, "vllm": _vllm_layout}

    def reads(self, config: dict) -> bool:
        return (
            layouts.is_sglang(config)
            or layouts.is_speculators(config)
            or layouts.mla.is_mla(config)
        )

    def read_export(self, config: dict) -> Eagle3Config:
        return layouts.read_config(config)

    def exported_aux_layers(self, config: dict) -> list[int] | None:
        return layouts.exported_aux_layers(config)

    def expected_tensors(self, config: dict) -> dict[str, tuple[int, ...]]:
        return layouts.expected_tensors(config)

    def layout_problems(self, config: dict) -> list[str]:
        return layouts.layout_problems(config)

    def aux_layer_rule(self, config: dict) -> str | None:
        return layouts.aux_layer_rule(config)

    def complete_weights(self, weights, config: Eagle3Config, folder: Path, target_dir):
        """SGLang exports ship no embedding (the server takes the target's); a full-vocabulary
        head ships no d2t/t2d; a checkpoint of a frozen draft head ships no head (it is the
        target's rows of the draft ids)."""
        if "embed_tokens.weight" not in weights:
            weights["embed_tokens.weight"] = target_tensor(folder, target_dir, "embed")
        if "d2t" not in weights:  # a full-vocabulary head: identity mapping
            if config.draft_vocab_size != config.vocab_size:
                raise DrafterLoadError(f"{folder}: draft vocabulary without a d2t mapping")
            weights["d2t"] = torch.zeros(config.draft_vocab_size, dtype=torch.long)
        if "t2d" not in weights:
            t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
            t2d[torch.arange(config.draft_vocab_size) + weights["d2t"]] = True
            weights["t2d"] = t2d
        if "lm_head.weight" not in weights and config.draft_head == "frozen":
            rows = torch.arange(config.draft_vocab_size) + weights["d2t"]
            weights["lm_head.weight"] = target_tensor(folder, target_dir, "head")[rows]
        return weights

    def speculative_configs(self) -> dict[str, SpeculativeConfigWriter]:
        return {"vllm": self.vllm_speculative_config}

    def vllm_speculative_config(self, drafter_dir: Path, k: int) -> dict:
        # speculators `eagle3` configs carry fc_norm/norm_output; the method name is eagle3
        # for both (`SpeculatorsConfig.build_vllm_speculative_config`)
        return {"method": "eagle3", "model": str(drafter_dir), "num_speculative_tokens": k}


def _sglang_layout(model, *, target, target_name, speculative_tokens, engine_version):
    """SGLang's `LlamaForCausalLMEagle3`, or its MLA class for an MLA drafter."""
    d = model.config
    if d.attention == "mla":
        config = layouts.mla.sglang_config(d, target, engine_version)
    else:
        config = layouts.sglang_config(d, target, engine_version)
    return config, layouts.exported_tensors(model)


def _vllm_layout(model, *, target, target_name, speculative_tokens, engine_version):
    """speculators `eagle3`, or vLLM's MLA class (ids at the top level) for an MLA drafter."""
    d = model.config
    if d.attention == "mla":
        config = layouts.mla.vllm_config(d, target)
    else:
        config = layouts.speculators_config(d, target, target_name, speculative_tokens)
    return config, layouts.exported_tensors(model)
