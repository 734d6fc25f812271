"""`DraftMethod`: everything eyas knows about one kind of drafter, in one place.

Training (`eyas.train.loop`), offline evaluation (`eyas.evaluate`), export and validation
(`eyas.export`) and loading (`eyas.drafter.load`) call a method through this interface and
never touch its layers. A method owns:

- its config, derived from the target (`build_config`), and which target layers it fuses, in
  HF `hidden_states` terms (`default_aux_layers`, `check_aux_layers`);
- its model (`build_model`), its training forward and loss (`prepare` then `loss`);
- its incremental decode: a `Proposer` (chain) and, where the method has one, tree drafts;
- its export layouts, one writer per engine (`layouts`, which `eyas.drafter.registry.LAYOUTS`
  gathers by (method, engine)), the loader rules that read them back
  (`reads`, `read_export`) and the validator's tensor shapes (`expected_tensors`).

A new method is one package under `eyas/drafter/`, its tests, and one line in
`eyas.drafter.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import torch
from torch import nn

from eyas.drafter.loss import StepStats, Teacher
from eyas.drafter.settings import MethodTrainSettings
from eyas.errors import EyasError, RefusedError
from eyas.hf_models import TargetModel, target_model

# the training settings a method's hooks read: `MethodTrainSettings` or its own narrower protocol
S = TypeVar("S", bound=MethodTrainSettings)


class Proposer(Protocol):
    """Incremental drafting against a target that verifies (`eyas.evaluate.speculative`).

    The target feeds the drafter one verified stretch at a time: `extend(tokens_after, aux)`
    where row j of `aux` ([1, n, A]) is the target's fused state at a verified position and
    `tokens_after[j]` the token that follows it (the last one is the token the next draft
    starts from). `propose(k)` returns k draft tokens (target ids) and, at temperature > 0,
    the distribution each was sampled from ([V] over the target vocabulary)."""

    aux_layers: list[int]

    def extend(self, tokens_after: list[int], aux: torch.Tensor) -> None: ...

    def propose(
        self, k: int, temperature: float, generator: torch.Generator | None
    ) -> tuple[list[int], list[torch.Tensor] | None]: ...


@dataclass
class TreeNode:
    token: int  # target id
    parent: int  # index in the tree; -1 = the last verified token
    depth: int  # 1 = a child of the last verified token


@dataclass
class Prepared:
    """One micro-batch as a method trains on it: the sequences, their supervision, whatever
    the method decided up front (anchors), and `counts[s]`, the positions trained at drafted
    slot s (summed over micro-batches and ranks, they normalise the loss)."""

    input_ids: torch.Tensor  # [B, T], right-padded
    supervised: torch.Tensor  # [B, T] 1 = trained token
    counts: torch.Tensor  # [S] float64
    extra: dict[str, Any]


def row_seed(seed: int, position: int, seq_id: str) -> int:
    """A sequence's seed at a global batch position: the same on any rank and after a resume
    (a method's random choices, such as DFlash's anchors, are drawn from it)."""
    import hashlib

    digest = hashlib.sha256(f"{seed}:{position}:{seq_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def check_layer_ids(aux_layers: list[int], num_layers: int, *, what: str) -> None:
    """Distinct ids in 1..N-1, in increasing order: id N is post-norm in transformers but
    pre-norm in SGLang and vLLM, so a drafter trained on it would be served a different tensor;
    id 0 is the bare embedding; both engines concatenate the captured states in layer order
    (their layer loops append them as they run), so a drafter whose `fc` was trained on another
    order is served its inputs permuted."""
    if list(aux_layers) != sorted(aux_layers):
        raise EyasError(
            "bad_aux_layers",
            f"aux layer ids {aux_layers}: {what} fuses them in layer order, as SGLang and vLLM "
            f"capture them ({sorted(aux_layers)})",
        )
    if len(set(aux_layers)) != len(aux_layers) or any(
        not 1 <= i <= num_layers - 1 for i in aux_layers
    ):
        raise EyasError(
            "bad_aux_layers",
            f"aux layer ids {aux_layers}: {what} fuses distinct layers with ids in "
            f"1..{num_layers - 1}",
        )


class DrafterLoadError(EyasError):
    def __init__(self, detail: str):
        super().__init__("bad_drafter", detail)


def target_tensor(folder: Path, target_dir: Any, role: str) -> torch.Tensor:
    """A tensor (embed | head) of the drafter's target, for exports that leave it to the
    engine; the target is the one given, else the one the export recorded."""
    import json

    meta = folder / "eyas_export.json"
    target = target_dir or (
        json.loads(meta.read_text()).get("target_dir") if meta.exists() else None
    )
    if target is None:
        raise DrafterLoadError(
            f"{folder} ships no {role} tensor: pass the target so it can be read from it"
        )
    found, _ = target_model(target).load_tensors(role)
    if role not in found:
        raise DrafterLoadError(f"no {role} tensor found in {target}")
    return found[role].float()


class LayoutWriter(Protocol):
    """Writes a drafter in one engine's layout: (config.json, tensors); `unsupported_export`
    where the engine (at `engine_version`, when the user named one) cannot serve it."""

    def __call__(
        self,
        model: nn.Module,
        *,
        target: TargetModel | None,
        target_name: str,
        speculative_tokens: int,
        engine_version: str | None,
    ) -> tuple[dict, dict[str, torch.Tensor]]: ...


def unsupported_export(method: str, fmt: str, why: str) -> RefusedError:
    return RefusedError("export_unsupported", f"{method} cannot be exported for {fmt}: {why}")


# (drafter folder in the engine's layout, draft tokens per step) -> the engine's speculative
# config for it
SpeculativeConfigWriter = Callable[[Path, int], dict]


class DraftMethod(ABC, Generic[S]):
    """One drafter method (see the module docstring). Instances are stateless. `S` is the
    protocol of the training settings its hooks read (`train_cfg`: a `TrainConfig` in training,
    which satisfies every method's)."""

    name: ClassVar[str]
    # whether `eyas.train.budget` counts its training exactly as EAGLE-3's TTT steps
    # (`step_flops`: its layer and its own head over the draft vocabulary); otherwise from its
    # trainable parameters, an approximation
    exact_step_flops: ClassVar[bool] = False
    # whether the budget's fast-path rows (activations and MFU, measured on EAGLE-3's fast
    # step: FlexAttention TTT attention and the fused loss) describe its step on CUDA; a
    # method without them is estimated as the reference path is
    fast_path_measured: ClassVar[bool] = False

    # -- config ----------------------------------------------------------------------------

    @abstractmethod
    def default_aux_layers(self, num_layers: int, train_cfg: S) -> list[int]:
        """HF `hidden_states` indices fused when the user names none."""

    @abstractmethod
    def check_aux_layers(self, aux_layers: list[int], num_layers: int) -> None: ...

    @abstractmethod
    def build_config(
        self,
        *,
        target: TargetModel,
        train_cfg: S,
        aux_layers: list[int],
        vocab: dict,
        max_positions: int,
    ) -> Any:
        """The drafter config for `target` (vocab: `eyas.drafter.vocab.build_vocab_mapping`)."""

    @abstractmethod
    def config_from_dict(self, raw: dict) -> Any: ...

    @abstractmethod
    def build_model(self, config: Any) -> nn.Module:
        """A freshly initialised drafter; `.config` is `config`, `.method` this method's name."""

    def draft_layers_problem(self, draft_layers: int | None) -> str | None:
        """Why the method cannot build a drafter of `draft_layers` decoder layers (None: the
        user named none), or None when it can."""
        return None

    def uses_draft_vocab(self) -> bool:
        """Whether the drafter has its own head over a reduced vocabulary."""
        return True

    def serving_refusal(self, engine: str) -> str | None:
        """Why the `engine` server eyas would start on this machine cannot serve the method's
        drafter (None: it can). A refusal of the server, not of the export: the engine's
        loader may still take the export."""
        return None

    def attentions(self) -> tuple[str, ...]:
        """The attention kinds (`--attention`) its drafter layer comes in; MLA needs an MLA
        target."""
        return ("mha",)

    def mask_token_id(self, target: TargetModel, train_cfg: S, seqs: list) -> int | None:
        """A token id the method needs reserved (DFlash's mask token), or None."""
        return None

    # -- training --------------------------------------------------------------------------

    @abstractmethod
    def num_slots(self, config: Any, train_cfg: S) -> int:
        """Drafted positions per training example (TTT steps, block slots)."""

    @abstractmethod
    def prepare(
        self,
        model: nn.Module,
        input_ids: torch.Tensor,
        supervised: torch.Tensor,
        *,
        train_cfg: S,
        seeds: list[int],
    ) -> Prepared:
        """Decide everything random up front (from `seeds`, one per row, so the batch is the
        same on any number of ranks and after a resume) and count the trained positions."""

    @abstractmethod
    def loss(
        self,
        model: nn.Module,
        raw_model: nn.Module,
        prepared: Prepared,
        *,
        aux: torch.Tensor,
        teacher: Teacher,
        normalizer: list[float],
        train_cfg: S,
    ) -> tuple[torch.Tensor, list[StepStats]]:
        """The training forward and loss of one micro-batch. `model` is the (possibly DDP or
        FSDP-wrapped) drafter to call, `raw_model` the module underneath; aux: [B, T, n*Ht]."""

    @abstractmethod
    def fsdp_units(self, model: nn.Module) -> list[nn.Module]:
        """Submodules FSDP2 shards as their own units, before the root."""

    @abstractmethod
    def init_from_target(
        self, model: nn.Module, *, embedding: torch.Tensor, head: torch.Tensor, vocab: dict
    ) -> None:
        """Copy the target's frozen tensors (and the draft vocabulary) into a new drafter."""

    # -- decoding --------------------------------------------------------------------------

    @abstractmethod
    def proposer(self, model: nn.Module) -> Proposer: ...

    def tree_proposer(self, model: nn.Module):
        """A proposer with `tree(depth, topk, num_nodes) -> list[TreeNode]`, or None."""
        return None

    # -- export, loading and validation ----------------------------------------------------

    @abstractmethod
    def layouts(self) -> dict[str, LayoutWriter]:
        """Engine -> the writer of this method's layout for it (the registry's (method, engine)
        pairs); an engine missing here gets `layout_refusal`."""

    def layout_refusal(self, engine: str) -> str:
        """Why the method has no layout for `engine` (the export's refusal)."""
        return f"eyas writes its layouts for {', '.join(sorted(self.layouts()))} only"

    @abstractmethod
    def reads(self, config: dict) -> bool:
        """Whether an exported `config.json` is this method's (the loader's dispatch)."""

    @abstractmethod
    def read_export(self, config: dict) -> Any:
        """The drafter config of an exported `config.json` (aux ids in HF terms)."""

    @abstractmethod
    def exported_aux_layers(self, config: dict) -> list[int] | None: ...

    @abstractmethod
    def expected_tensors(self, config: dict) -> dict[str, tuple[int, ...]]:
        """Tensor name -> shape an export of `config` must ship (the validator's rule)."""

    def layout_problems(self, config: dict) -> list[str]:
        """Keys that engine versions would read differently (the validator's rule)."""
        return []

    def aux_layer_rule(self, config: dict) -> str | None:
        """How `exported_aux_layers` read the config's layer ids, when there was a choice."""
        return None

    def complete_weights(
        self, weights: dict[str, torch.Tensor], config: Any, folder: Path, target_dir: Any
    ) -> dict[str, torch.Tensor]:
        """Fill what an export leaves to the engine (the target's embedding, ...)."""
        return weights

    @abstractmethod
    def speculative_configs(self) -> dict[str, SpeculativeConfigWriter]:
        """Engine -> the writer of its speculative config (vLLM's `--speculative-config`) for a
        drafter exported in this method's layout for it: the (method, engine) pairs eyas
        serves, beside `layouts`."""
