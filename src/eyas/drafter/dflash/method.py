"""DFlash as a `DraftMethod`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from eyas.drafter.dflash import export as layouts
from eyas.drafter.dflash.decode import DFlashProposer
from eyas.drafter.dflash.model import DFlashConfig, DFlashDrafter
from eyas.drafter.dflash.options import DFlashOptions
from eyas.drafter.dflash.train import block_loss, select_anchors, slot_targets
from eyas.drafter.fast_path import fast_path_on, loss_compiled
from eyas.drafter.loss import StepStats, Teacher
from eyas.drafter.memory import checkpointing_on
from eyas.drafter.method import (
    DraftMethod,
    LayoutWriter,
    MethodTrainSettings,
    Prepared,
    SpeculativeConfigWriter,
    check_layer_ids,
    target_tensor,
)
from eyas.drafter.shape import drafter_shape
from eyas.errors import EyasError
from eyas.hf_models import TargetModel


class DFlashTrainSettings(MethodTrainSettings, Protocol):
    """What DFlash's hooks read: the shared settings and its own options (`options.py`)."""

    dflash: DFlashOptions


# DFlash's settings, or a method's built on DFlash (DFlash2's)
D = TypeVar("D", bound=DFlashTrainSettings)


class DFlashMethod(DraftMethod[D]):
    name = "dflash"

    # -- config ----------------------------------------------------------------------------

    # Defaults from bench/results/dflash_sweep_200.json (the toy, 200 steps, docs/dflash.md):
    # two draft layers against one, 1.70 against 1.35 acceptance length; three fused target
    # layers against z-lab's one for a one-layer drafter, 1.54 against 1.35.
    DEFAULT_DRAFT_LAYERS = 2
    MIN_FUSED = 3

    def draft_layers(self, train_cfg: D) -> int:
        return getattr(train_cfg, "draft_layers", None) or self.DEFAULT_DRAFT_LAYERS

    def default_aux_layers(self, num_layers: int, train_cfg: D | None = None) -> list[int]:
        """z-lab's and SGLang's spread (`build_target_layer_ids`) over layer outputs 1..N-3,
        in HF terms (+1), of max(draft layers, 3) target layers (at most N-1): z-lab fuses one
        per draft layer, which leaves a one-layer drafter a single middle layer to read. The
        exports always name the ids, so engines fuse what was trained. For targets too shallow
        for that rule to give distinct ids, the same count spread evenly over HF 1..N-1."""
        draft_layers = self.draft_layers(train_cfg)
        count = min(max(draft_layers, self.MIN_FUSED), max(1, num_layers - 1))
        ids = sorted(i + 1 for i in layouts.zlab_default_target_layers(num_layers, count))
        if len(set(ids)) == len(ids) and all(1 <= i <= num_layers - 1 for i in ids):
            return ids
        if count == 1:
            return [max(1, num_layers // 2)]
        span = num_layers - 2
        return [round(1 + i * span / (count - 1)) for i in range(count)]

    def check_aux_layers(self, aux_layers: list[int], num_layers: int) -> None:
        if not aux_layers:
            raise EyasError("bad_aux_layers", "DFlash fuses at least one target layer")
        check_layer_ids(aux_layers, num_layers, what="DFlash")

    def uses_draft_vocab(self) -> bool:
        return False  # the target's head, frozen (SGLang's DFlash has no head of its own)

    def mask_token_id(self, target: TargetModel, train_cfg: D, seqs: list) -> int:
        """`pick_mask_token` with `--dflash.mask-token-id`."""
        return self.pick_mask_token(target, train_cfg.dflash.mask_token_id, seqs)

    def pick_mask_token(self, target: TargetModel, chosen: int | None, seqs: list) -> int:
        """The chosen id, else the target's pad token, else the highest id no training
        sequence contains (TorchSpec's Qwen3 DFlash config uses the pad token likewise). Its
        embedding is the target's row, frozen like the rest.

        The row must not be zero (many checkpoints zero the pad row, as the toys do): a zero
        mask embedding is zero after the input norm, so every mask slot's query and key are
        zero: the first layer's attention is uniform and all mask slots of a block leave it
        with the same state whatever their position (slot 1 sees only the context's mean;
        later slots differ from it only by what RoPE makes of that in deeper layers)."""
        used = _used_ids(seqs, target.vocab_size)
        rows = self._embedding_norms(target)
        floor = 1e-3 * float(rows.median()) if rows is not None else 0.0

        def usable(i: int) -> bool:
            return rows is None or float(rows[i]) > floor

        if chosen is not None:
            mask = int(chosen)
            if not 0 <= mask < target.vocab_size:
                raise EyasError("bad_flag", f"mask_token_id {mask} is outside the vocab")
            if not usable(mask):
                raise EyasError(
                    "mask_token_zero_embedding",
                    f"mask_token_id {mask} has a zero embedding row in the target: every block "
                    "slot would compute the same state; pick a token with a trained row",
                )
            return mask
        pad = target.token_ids().get("pad_token_id")
        if isinstance(pad, int) and 0 <= pad < target.vocab_size and not used[pad] and usable(pad):
            return pad
        free = ~used
        if rows is not None:  # the embedding may have padding rows past the vocab, or fewer
            has_row = np.zeros(len(used), bool)
            n = min(len(used), len(rows))
            has_row[:n] = rows[:n].numpy() > floor
            free &= has_row
        if not free.any():
            raise EyasError(
                "no_mask_token",
                "every token id with a non-zero embedding occurs in the data: "
                "choose one (--dflash.mask-token-id N)",
            )
        return int(np.flatnonzero(free)[-1])  # the highest free id

    @staticmethod
    def _embedding_norms(target: TargetModel) -> torch.Tensor | None:
        """The L2 norm of each row of the target's input embedding; None when the checkpoint
        has no weights here (a config-only target)."""
        try:
            found, _ = target.load_tensors("embed")
        except (OSError, EyasError):
            return None
        embed = found.get("embed")
        if embed is None:
            return None
        # row blocks: a Kimi-sized embedding in fp32 at once would be another 4.7 GB
        return torch.cat([rows.float().norm(dim=-1) for rows in embed.split(8192)])

    def build_config(
        self,
        *,
        target: TargetModel,
        train_cfg: D,
        aux_layers: list[int],
        vocab: dict,
        max_positions: int,
    ) -> DFlashConfig:
        shape = drafter_shape(
            target,
            num_attention_heads=train_cfg.num_attention_heads,
            head_dim=train_cfg.head_dim,
            intermediate_size=train_cfg.intermediate_size,
        )
        return DFlashConfig(
            hidden_size=target.hidden_size,
            intermediate_size=shape.intermediate_size,
            num_hidden_layers=self.draft_layers(train_cfg),
            num_attention_heads=shape.num_attention_heads,
            num_key_value_heads=shape.num_key_value_heads,
            head_dim=shape.head_dim,
            vocab_size=target.vocab_size,
            target_hidden_size=target.hidden_size,
            aux_layer_ids=list(aux_layers),
            block_size=train_cfg.dflash.block_size,
            mask_token_id=vocab["mask_token_id"],
            max_position_embeddings=max_positions,
            rms_norm_eps=target.rms_norm_eps,
            rope_theta=target.rope_theta,
            rope_scaling=target.rope_scaling,
            target_num_layers=target.num_layers,
            extra={"shape": shape.why},
        )

    def config_from_dict(self, raw: dict) -> DFlashConfig:
        fields = DFlashConfig.__dataclass_fields__
        return DFlashConfig(**{k: v for k, v in raw.items() if k in fields})

    def build_model(self, config: DFlashConfig) -> DFlashDrafter:
        return DFlashDrafter(config)

    def init_from_target(self, model, *, embedding, head, vocab) -> None:
        with torch.no_grad():
            model.embed_tokens.weight.copy_(embedding.float())
            model.lm_head.weight.copy_(head.float())

    # -- training --------------------------------------------------------------------------

    def num_slots(self, config: DFlashConfig, train_cfg: D) -> int:
        return config.block_size - 1

    def prepare(self, model, input_ids, supervised, *, train_cfg: D, seeds) -> Prepared:
        lengths = [self._length(supervised[r]) for r in range(supervised.shape[0])]
        anchors, valid = select_anchors(supervised, lengths, train_cfg.dflash.max_anchors, seeds)
        _, mask = slot_targets(supervised, anchors, valid, model.config.block_size)
        counts = mask.flatten(0, 1).sum(0).to(torch.float64).cpu()  # [bs-1]
        return Prepared(input_ids, supervised, counts, {"anchors": anchors, "valid": valid})

    @staticmethod
    def _length(supervised: torch.Tensor) -> int:
        """A right-padded row's length: through its last supervised token (padding is never
        supervised, and no anchor or target lies past the last supervised token)."""
        nz = supervised.nonzero()
        return int(nz[-1]) + 1 if len(nz) else 0

    def loss(
        self,
        model: nn.Module,
        raw_model: nn.Module,
        prepared: Prepared,
        *,
        aux: torch.Tensor,
        teacher: Teacher,
        normalizer: list[float],
        train_cfg: D,
    ) -> tuple[torch.Tensor, list[StepStats]]:
        ac = checkpointing_on(train_cfg, prepared.input_ids.numel())
        states = model(prepared.input_ids, aux, prepared.extra["anchors"], checkpoint_layers=ac)
        return self.block_loss(raw_model, states, prepared, teacher, sum(normalizer), train_cfg)

    def block_loss(
        self,
        raw_model: nn.Module,
        states: torch.Tensor,
        prepared: Prepared,
        teacher: Teacher,
        normalizer: float,
        train_cfg: D,
    ) -> tuple[torch.Tensor, list[StepStats]]:
        """The loss of the blocks' states [B, A, bs, H] (`eyas.drafter.dflash.train`)."""
        return block_loss(
            states,
            teacher,
            prepared.supervised,
            prepared.extra["anchors"],
            prepared.extra["valid"],
            normalizer,
            weighting=train_cfg.dflash.weighting,
            gamma=train_cfg.dflash.gamma,
            alpha=train_cfg.dflash.dpace_alpha,
            chunk=train_cfg.chunk_len,
            fast=fast_path_on(train_cfg, prepared.input_ids.device),
            compiled=loss_compiled(train_cfg),
        )

    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        return list(model.layers)

    # -- decoding --------------------------------------------------------------------------

    def proposer(self, model: DFlashDrafter) -> DFlashProposer:
        return DFlashProposer(model)

    # -- export, loading and validation ----------------------------------------------------

    def layouts(self) -> dict[str, LayoutWriter]:
        return {"sglang": self._zlab_layout, "vllm": self._speculators_layout}

    def _zlab_layout(self, model, *, target, target_name, speculative_tokens, engine_version):
        """z-lab's `DFlashDraftModel`, which SGLang loads."""
        return layouts.zlab_config(model.config, target), layouts.exported_tensors(model)

    def _speculators_layout(
        self, model, *, target, target_name, speculative_tokens, engine_version
    ):
        """speculators `dflash`, which vLLM loads."""
        config = layouts.speculators_config(model.config, target, target_name, speculative_tokens)
        return config, layouts.exported_tensors(model)

    def reads(self, config: dict) -> bool:
        return layouts.is_dflash_family(config) and not layouts.is_dflash2(config)

    def read_export(self, config: dict) -> DFlashConfig:
        return layouts.read_config(config)

    def exported_aux_layers(self, config: dict) -> list[int] | None:
        return layouts.exported_aux_layers(config)

    def expected_tensors(self, config: dict) -> dict[str, tuple[int, ...]]:
        return layouts.expected_tensors(config)

    def complete_weights(self, weights, config: DFlashConfig, folder: Path, target_dir):
        for name, role in (("embed_tokens.weight", "embed"), ("lm_head.weight", "head")):
            if name not in weights:
                weights[name] = target_tensor(folder, target_dir, role)
        return weights

    def speculative_configs(self) -> dict[str, SpeculativeConfigWriter]:
        return {"vllm": self.vllm_speculative_config}

    def vllm_speculative_config(self, drafter_dir: Path, k: int) -> dict:
        """vLLM drafts blocks of `1 + num_speculative_tokens` (`v1/spec_decode/dflash.py`):
        the drafter's block, `block_size - 1`; another k would serve blocks it never saw."""
        from eyas.jsonl import read_json_object

        block = layouts.read_config(read_json_object(drafter_dir / "config.json")).block_size
        if k != block - 1:
            raise EyasError(
                "bad_flag",
                f"the DFlash drafter was trained on blocks of {block}: vLLM serves blocks of "
                f"k + 1, so evaluate it with --k {block - 1}, not {k}",
            )
        return {"method": "dflash", "model": str(drafter_dir), "num_speculative_tokens": k}


def _used_ids(seqs: Any, vocab_size: int) -> np.ndarray:
    """[vocab] bool: which ids the training data holds. A packed index is counted in one pass
    over its token array (a Kimi-scale run holds ~1B tokens: a Python set of them took minutes);
    a plain list of sequences is read as it comes."""
    tokens = getattr(seqs, "tokens", None)
    if tokens is None:
        tokens = np.fromiter((t for s in seqs for t in s.ids), dtype=np.int64)
    tokens = np.asarray(tokens)
    tokens = tokens[(tokens >= 0) & (tokens < vocab_size)]
    return np.bincount(tokens, minlength=vocab_size)[:vocab_size] > 0
