"""`eyas train`: drafter training, for any registered method (EAGLE-3, EAGLE-3.1, DFlash).

    eyas train --target MODEL_DIR --data runs/x/generate --out runs/x/drafter --steps 2000
    eyas train --method eagle3.1 --target MODEL_DIR --data runs/x/generate --out runs/x/d31
    eyas train --method dflash --dflash.block-size 8 --draft-layers 2 --target MODEL_DIR \
        --data runs/x/generate --out runs/x/dflash [--dflash.weighting dpace]
    eyas train --target MODEL_DIR --hidden-states runs/x/capture --out runs/x/drafter
    eyas train --target MODEL_DIR --data runs/x/generate --capture-ahead 8 \
        --capture-backend vllm --capture-url http://capture:8000 --out runs/x/drafter
    torchrun --nproc-per-node 8 -m eyas.cli train --config train.toml     # DDP (FSDP2: fsdp=true)

Three sources for the target's states: the target online in this process (transformers;
small targets), an `eyas capture` directory (`--hidden-states`; only the target's embedding,
final norm and lm_head are loaded), or a capture streamed ahead of training through the engine
(`--capture-ahead N`, disk bounded to N batches).

The method (`eyas.drafter`) owns the drafter: its config derived from the target, the target
layers it fuses, its training forward and loss. The loop owns data, optimizer, accumulation,
ranks, checkpoints and metrics. Skeleton: setup (`_setup_data`: the packed index and the batch
plan; `_setup_target`: captured, streamed or online, from `source`; `_setup_drafter`;
`_setup_optimizer`; `_resume`) / train / save_checkpoint / cleanup.
Resuming is automatic: rerun the same command and it continues from `OUT/checkpoints/latest`
with model, optimizer, scheduler, RNG and data position restored, reproducing the
uninterrupted loss curve.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from eyas import __version__
from eyas.drafter.fast_path import fast_path_on
from eyas.drafter.loss import Teacher, resolved
from eyas.drafter.memory import (
    AC_AUTO_TOKENS,
    AC_OFF_SHARE,
    ac_threshold,
    checkpointing_on,
    default_max_len,
    device_memory_bytes,
)
from eyas.drafter.method import DraftMethod, row_seed
from eyas.drafter.names import CAPTURES_BEFORE_METHOD
from eyas.drafter.registry import get_method
from eyas.drafter.vocab import choose_draft_vocab, token_counts
from eyas.errors import EyasError
from eyas.hf_models import TargetModel, target_model
from eyas.store import quarantined_ids
from eyas.train.budget import resolved_checkpointing_above, trainer_budget
from eyas.train.checkpoint import (
    frozen_names,
    full_state,
    latest_checkpoint,
    load_checkpoint,
    resume_mismatch,
    save_drafter,
    save_sharded,
)
from eyas.train.config import TrainConfig
from eyas.train.data import (
    Sequence,
    check_token_ids,
    load_captured_sequences,
    load_sequences,
)
from eyas.train.metrics import MetricsWriter, acceptance_estimate, truncate_metrics
from eyas.train.plan import FILLER_TOKENS, BatchPlan
from eyas.train.precision import hold_frozen
from eyas.train.result import StepMetrics, TrainResult
from eyas.train.target import CapturedTarget, OnlineTarget


def _collate(seqs: list[Sequence], device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and supervision [B, T] (padding is never supervised)."""
    width = max(len(s.ids) for s in seqs)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    sup = torch.zeros(len(seqs), width, dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s.ids)] = torch.tensor(s.ids)
        sup[r, : len(s.ids)] = torch.tensor(s.supervised)
    return ids.to(device), sup.to(device)


class Trainer:
    def __init__(self, cfg: TrainConfig, log: Callable[[str], None] = print):
        self.cfg = cfg
        self.log = log
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.device = cfg.device or ("cuda" if torch.cuda.is_available() else "cpu")

    # -- setup --------------------------------------------------------------------------------

    def setup(self) -> None:
        """Like a torchtune recipe: distributed, data, target, drafter, optimizer, resume. The
        target directory is read once (`self.tmodel`)."""
        cfg = self.cfg
        self._setup_distributed()
        torch.manual_seed(cfg.seed)
        cfg.out.mkdir(parents=True, exist_ok=True)
        self.method: DraftMethod = get_method(cfg.method)
        self.tmodel = target_model(cfg.target)
        self.stream = None
        self._setup_data()
        self._setup_target()
        self._setup_drafter()
        self._setup_optimizer()
        self._resolve_checkpointing()
        if self.rank == 0:  # what the run will need, before it runs
            self.log(self._printed_budget().line())
        self._resume()
        if self.source == "streamed":
            self._start_stream()

    @property
    def source(self) -> str:
        """Where the target's states come from: `captured` (an `eyas capture` directory),
        `streamed` (captured ahead of training through the engine) or `online` (the target
        runs in this process)."""
        if self.cfg.hidden_states is not None:
            return "captured"
        return "streamed" if self.cfg.capture_ahead else "online"

    def _setup_distributed(self) -> None:
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.startswith("cuda") else "gloo")
            if self.device.startswith("cuda"):
                self.device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
                torch.cuda.set_device(self.device)

    def _setup_data(self) -> None:
        """The packed sequence index, its report, and the batch plan."""
        cfg = self.cfg
        self.max_len = cfg.max_len or default_max_len(
            self.tmodel, cfg, self.device, self.method.attentions()
        )
        self.quarantine_file = None
        self.manifest = None
        if self.source == "captured":
            self.seqs, self.data_report, self.manifest = load_captured_sequences(
                cfg.hidden_states, self.max_len, cfg.length_policy
            )
        else:
            quarantined, self.quarantine_file = quarantined_ids(
                cfg.data, cfg.quarantine, cfg.include_quarantined
            )
            self.seqs, self.data_report = load_sequences(
                cfg.data, self.max_len, cfg.length_policy, cfg.truncated, quarantined
            )
        if not self.seqs:
            raise EyasError(
                "no_training_data",
                f"no usable training samples in {cfg.hidden_states or cfg.data}: "
                f"{self.data_report.as_dict()}",
            )
        check_token_ids(self.seqs, self.tmodel.vocab_size, cfg.hidden_states or cfg.data)
        if self.rank == 0:
            report = self.data_report
            self.log(
                f"max_len {self.max_len} ({'--max-len' if cfg.max_len else 'default: fits the device'}"
                f"): {report.excluded.get('over_max_len', 0)} longer samples skipped, "
                f"{report.truncated} cut (--length-policy {cfg.length_policy})"
            )
        self.plan = BatchPlan(self.seqs.lengths, cfg.batch_tokens, cfg.seed)

    def _setup_target(self) -> None:
        cfg = self.cfg
        if self.source == "captured":
            self.target = CapturedTarget(self.tmodel, self.manifest, self.device)
        elif self.source == "streamed":
            from eyas.capture.run import capture_layers

            layers, _ = capture_layers(cfg.target, cfg.aux_layers, cfg.method, cfg, self.tmodel)
            streamed = {"aux_layers": layers[:-1], "method": cfg.method}
            self.target = CapturedTarget(self.tmodel, streamed, self.device)
            self.stream_layers = layers
        else:
            depth = self.tmodel.num_layers
            aux = cfg.aux_layers or self.method.default_aux_layers(depth, cfg)
            self.method.check_aux_layers(aux, depth)
            dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
            self.target = OnlineTarget(cfg.target, aux, self.device, dtype, cfg.trust_remote_code)
        self._check_fused_layers(self.tmodel)
        check_token_ids(self.seqs, self.target.vocab_size, cfg.hidden_states or cfg.data)

    def _setup_drafter(self) -> None:
        vocab = self._vocab(self.tmodel)
        self.dcfg = self.method.build_config(
            target=self.tmodel,
            train_cfg=self.cfg,
            aux_layers=self.target.aux_layers,
            vocab=vocab,
            max_positions=max(self.max_len, self.tmodel.context_length),
        )
        model = self.method.build_model(self.dcfg)
        self.method.init_from_target(
            model, embedding=self.target.embedding(), head=self.target.head(), vocab=vocab
        )
        self.raw_model = model.to(self.device)
        if self.bf16:  # the target's tensors as they are read (eyas.train.precision)
            hold_frozen(self.raw_model, torch.bfloat16)
        self.model = self._wrap(self.raw_model)
        self.vocab_info = {k: v for k, v in vocab.items() if k not in ("d2t", "t2d")}
        self.slots = self.method.num_slots(self.dcfg, self.cfg)

    def _setup_optimizer(self) -> None:
        cfg = self.cfg
        params = [p for p in self.raw_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)

    def _budget(self, checkpointing: bool, tokens: int | None = None):
        """The per-GPU estimate (`eyas.train.budget`) for micro-batches of `tokens` tokens on
        this rank (default: `tokens_per_rank`)."""
        return trainer_budget(
            self.raw_model,
            self.target.head(),
            len(self.target.aux_layers),
            self.slots,
            tokens or self.tokens_per_rank,
            self.world,
            self.cfg.fsdp,
            self.device,
            checkpointing=checkpointing,
            dtype_bytes=2 if self.bf16 else 4,
            fast=fast_path_on(self.cfg, self.device),
            target_bytes=self.target.device_bytes(),
        )

    @property
    def tokens_per_rank(self) -> int:
        """A micro-batch's tokens on this rank: the global --batch-tokens split over the ranks."""
        return -(-self.cfg.batch_tokens // self.world)

    def _printed_budget(self):
        """The estimate at the run's micro-batch size with AC as it will run there; under
        `auto` with that size over the threshold, the widest micro-batch without AC (at the
        threshold) when it needs more."""
        cfg = self.cfg
        tokens = self.tokens_per_rank
        budget = self._budget(checkpointing_on(cfg, tokens))
        if cfg.activation_checkpointing == "auto" and tokens > ac_threshold(cfg):
            below = self._budget(False, ac_threshold(cfg))
            budget = below if below.total_gb > budget.total_gb else budget
        return budget

    def _resolve_checkpointing(self) -> None:
        """`--activation-checkpointing auto` without a threshold, on a GPU: the most tokens
        per micro-batch whose step fits `AC_OFF_SHARE` of the GPU without AC by the estimate
        (`auto_checkpointing_above`), the least over the ranks, set once for the run (and so
        recorded in its manifest). Elsewhere `AC_AUTO_TOKENS` stays."""
        cfg = self.cfg
        above = resolved_checkpointing_above(cfg, lambda: self._budget(False), self.device)
        if above is None:
            return
        if self.world > 1:  # one rule for every rank, whatever each one's device
            agreed = torch.tensor([above], device=self.device)
            dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
            above = int(agreed.item())
        cfg.activation_checkpointing_above = above
        if self.rank == 0:
            gb = device_memory_bytes(self.device) / 1e9
            self.log(
                f"activation checkpointing (auto): off for micro-batches of up to {above:,} "
                f"tokens (by the estimate a step without it fits {AC_OFF_SHARE:.0%} of this "
                f"GPU's {gb:.0f} GB up to there; at least {AC_AUTO_TOKENS:,}), on above; "
                "--activation-checkpointing-above sets the threshold"
            )

    def _resume(self) -> None:
        self.step = 0
        self.batches_done = 0
        self.ckpt_root = self.cfg.out / "checkpoints"
        ckpt = latest_checkpoint(self.ckpt_root)
        if ckpt is not None:
            why = resume_mismatch(ckpt, self.raw_model, self._drafter_config())
            if why:
                raise EyasError("checkpoint_mismatch", why)
            state = load_checkpoint(
                ckpt, self.raw_model, self.optimizer, self.scheduler, self.sharded
            )
            self.step, self.batches_done = state["step"], state["batches_done"]
            was = state.get("world_size", "?")
            if self.rank == 0:  # one line per run, not one per rank
                self.log(
                    f"resumed from {ckpt.name} (step {self.step}; written by {was} ranks, "
                    f"read by {self.world})"
                )
                truncate_metrics(self.cfg.out / "metrics.jsonl", self.step)

    def _check_fused_layers(self, tmodel: TargetModel) -> None:
        """Captured states fix the fused layers: the method must accept them, a different
        --aux-layers is a mistake, not a silent substitution, and without --aux-layers they
        must be the layers the method fuses online (a DFlash drafter trained on an EAGLE-3
        capture would fuse EAGLE-3's layers, unlike the same drafter trained online)."""
        aux = list(self.target.aux_layers)
        if self.cfg.aux_layers and list(self.cfg.aux_layers) != aux:
            raise EyasError(
                "bad_aux_layers",
                f"the captured states are of layers {aux}, not --aux-layers {self.cfg.aux_layers}",
            )
        if self.cfg.hidden_states is not None and not self.cfg.aux_layers:
            fused = self.method.default_aux_layers(tmodel.num_layers, self.cfg)
            if list(fused) != aux:
                captured_for = getattr(self.target, "captured_for", CAPTURES_BEFORE_METHOD)
                raise EyasError(
                    "capture_layers_mismatch",
                    f"{self.cfg.hidden_states} holds layers {aux} (captured for {captured_for}); "
                    f"--method {self.cfg.method} fuses {fused}: capture again with --method "
                    f"{self.cfg.method} (or --aux-layers {','.join(map(str, fused))}), or train "
                    f"on these layers with --aux-layers {','.join(map(str, aux))}",
                )
        self.method.check_aux_layers(aux, tmodel.num_layers)

    def _start_stream(self) -> None:
        from eyas.backends.registry import backend_class, open_pool
        from eyas.capture.run import capture_settings
        from eyas.train.stream import CaptureStream

        cfg = self.cfg
        remote = backend_class(cfg.capture_backend).remote
        server = cfg.capture_server
        if remote and not server.urls and server.url_file is None:
            raise EyasError(
                "bad_flag",
                f"--capture-backend {cfg.capture_backend} needs --capture-url or --capture-url-file",
            )
        settings = capture_settings(cfg.target, self.stream_layers, cfg.trust_remote_code)

        def pool():  # every --capture-url, under the client policy; closed with the stream
            return open_pool(cfg.capture_backend, settings, server, operation="capture")

        # every rank captures the share it trains, into a spool only it reads (local disk)
        spool = cfg.spool_dir or cfg.out / "spool"
        spool = spool if self.world == 1 else spool / f"rank-{self.rank}"
        self.stream = CaptureStream(
            spool,
            lambda position: self._share(position)[0],
            pool,
            cfg.capture_ahead,
            cfg.steps * cfg.grad_accum,
            torch.bfloat16 if self.device.startswith("cuda") else torch.float32,
            self.log,
            cfg.spool_mb * 2**20 if cfg.spool_mb else None,
        )
        self.stream.start(self.batches_done)

    def _stream_ready(self, positions: list[int]) -> None:
        """Every rank's shards for this step are there, or every rank stops: each rank waits
        for its own producer, then the ranks all-reduce one failure flag per rank, so a
        producer's failure ends the run on all ranks at this step with its reason."""
        error = self.stream.wait(positions)
        failed = [0] if error is not None else []
        if self.world > 1:
            flags = torch.zeros(self.world, dtype=torch.int32)
            flags[self.rank] = int(error is not None)
            dist.all_reduce(flags)
            failed = flags.nonzero().flatten().tolist()
        if error is not None:
            raise error
        if failed:
            raise EyasError(
                "capture_failed",
                f"the streamed capture of rank {failed[0]} failed (its log says why); "
                "every rank stops, the run resumes from its last checkpoint",
            )

    @property
    def sharded(self) -> bool:
        return self.world > 1 and self.cfg.fsdp

    @property
    def bf16(self) -> bool:
        precision = self.cfg.precision
        return precision == "bf16" or (precision == "auto" and self.device.startswith("cuda"))

    def _wrap(self, model: torch.nn.Module):
        if self.world == 1:
            return model
        if self.cfg.fsdp:
            # FSDP2: parameters become DTensor shards in place; the method names the units
            # sharded on their own (decoder layers, a head the loss calls outside forward).
            # Gradients are reduce-scattered as a mean over ranks, like DDP's all-reduce.
            # bf16: each unit all-gathers bf16 copies of its fp32 shards and reduce-scatters
            # fp32 gradients. The frozen target tensors (embedding; DFlash's head) stay out of
            # every unit: nothing to reduce, so gathering them each step would be pure traffic;
            # each rank holds them whole (in bf16 under bf16).
            from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

            frozen = {p for p in model.parameters() if not p.requires_grad}
            if self.bf16:  # the frozen tensors are bf16 already (`_setup_drafter`)
                # Inputs are cast by autocast (on whenever bf16 is), not by each unit.
                policy = MixedPrecisionPolicy(
                    param_dtype=torch.bfloat16,
                    reduce_dtype=torch.float32,
                    cast_forward_inputs=False,
                )
            else:
                policy = MixedPrecisionPolicy()
            for unit in self.method.fsdp_units(model):
                unit_frozen = {p for p in unit.parameters() if not p.requires_grad}
                fully_shard(unit, mp_policy=policy, ignored_params=unit_frozen or None)
            sharded = fully_shard(model, mp_policy=policy, ignored_params=frozen or None)
            if self.rank == 0:
                dtype = "bf16 compute, fp32 reduce" if self.bf16 else "fp32"
                self.log(f"drafter sharded with FSDP2 across {self.world} ranks ({dtype})")
            return sharded
        return torch.nn.parallel.DistributedDataParallel(model)

    def _grad_sync(self, last: bool):
        """Gradients are reduced across ranks once per optimizer step, on the last
        micro-batch; the others accumulate locally."""
        if self.world == 1:
            return contextlib.nullcontext()
        if self.sharded:
            self.model.set_requires_gradient_sync(last)
            return contextlib.nullcontext()
        return contextlib.nullcontext() if last else self.model.no_sync()

    def _vocab(self, tmodel: TargetModel) -> dict:
        """Draft vocabulary over supervised tokens, cached in OUT keyed by the data (the full
        vocabulary for a method that drafts with the target's head), and any token id the
        method reserves."""
        import hashlib

        if not self.method.uses_draft_vocab():
            size = self.target.vocab_size
            vocab = {
                "d2t": torch.zeros(size, dtype=torch.long),
                "t2d": torch.ones(size, dtype=torch.bool),
                "draft_vocab_size": size,
                "requested_draft_vocab_size": size,
                "coverage": 1.0,
            }
        else:
            key = hashlib.sha256(
                json.dumps(
                    [self.cfg.draft_vocab, self.target.vocab_size, self.seqs.sample_ids()]
                ).encode()
            ).hexdigest()[:16]
            cache = self.cfg.out / f"vocab-{key}.pt"
            # Rank 0 counts and writes (to a temporary name, renamed: never read half
            # written); the other ranks read it after the barrier.
            if self.rank == 0 and not cache.exists():
                counts = token_counts(
                    [(self.seqs.tokens, self.seqs.supervised)], self.target.vocab_size
                )
                vocab = choose_draft_vocab(counts, self.cfg.draft_vocab)
                cache.parent.mkdir(parents=True, exist_ok=True)
                tmp = cache.with_suffix(f".tmp{os.getpid()}")
                torch.save(vocab, tmp)
                os.replace(tmp, cache)
            else:
                vocab = None
            if self.world > 1:
                dist.barrier()
            if vocab is None:
                vocab = torch.load(cache, weights_only=True)
        if self.method.uses_draft_vocab() and self.rank == 0:
            self.log(
                f"draft vocabulary: {vocab['draft_vocab_size']} of {self.target.vocab_size} "
                f"tokens, covering {vocab['coverage']:.2%} of the supervised tokens "
                f"({vocab.get('draft_vocab_choice', 'cached')})"
            )
        mask = self.method.mask_token_id(tmodel, self.cfg, self.seqs)
        return vocab if mask is None else {**vocab, "mask_token_id": mask}

    def _lr_factor(self, step: int) -> float:
        warm = self.cfg.warmup_steps
        if step < warm:
            return (step + 1) / warm
        progress = min(1.0, (step - warm) / max(1, self.cfg.steps - warm))
        floor = self.cfg.min_lr_ratio
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

    # -- train ----------------------------------------------------------------------------------

    def _global_batch(self, position: int) -> list[int]:
        return self.plan.batch(position).tolist()

    def _batch_at(self, position: int) -> tuple[list[Sequence], float]:
        """This rank's share of batch `position` (`_share`), with its streamed states."""
        mine, weight = self._share(position)
        if self.stream is not None:  # this batch's states, from the spool
            rows = self.stream.rows(position)
            mine = [replace(s, source=rows[s.id]) for s in mine]
        return mine, weight

    def _share(self, position: int) -> tuple[list[Sequence], float]:
        """This rank's token-balanced share of global batch `position`, and its loss weight. A
        rank left without sequences runs a short prefix at weight 0 so DDP's collective
        backward matches."""
        mine = [self.seqs[i] for i in self.plan.share(position, self.rank, self.world).tolist()]
        weight = 1.0
        if not mine:
            s = self.seqs[self.plan.filler(position)]
            n = min(len(s.ids), FILLER_TOKENS)
            mine, weight = [replace(s, ids=s.ids[:n], supervised=[0] * n)], 0.0
        return mine, weight

    def _epoch_len(self) -> int:
        return self.plan.epoch_len

    def _target_outputs(self, ids: torch.Tensor, seqs: list[Sequence]):
        """aux hidden states [B, T, 3H] and final hidden states [B, T, H] of the target (a
        seam for bench_train, which times the drafter step on precomputed target outputs)."""
        return self.target(ids, seqs)

    def _train_step(self) -> dict[str, Any]:
        cfg = self.cfg
        if self.stream is not None:
            self._stream_ready([self.batches_done + m for m in range(cfg.grad_accum)])
        micro = [self._batch_at(self.batches_done + m) for m in range(cfg.grad_accum)]
        prefetch = getattr(self.target, "prefetch", None)
        if prefetch is not None and self.stream is None:  # read ahead: this step, the next
            for seqs, _ in [*micro, self._batch_at(self.batches_done + cfg.grad_accum)]:
                prefetch(seqs)
        # Normaliser per drafted slot: trained positions over all micro-batches and ranks.
        counts = torch.zeros(self.slots, dtype=torch.float64)
        prepared = []
        for m, (seqs, weight) in enumerate(micro):
            ids, sup = _collate(seqs, self.device)
            sup = sup * int(weight)
            seeds = [row_seed(cfg.seed, self.batches_done + m, s.id) for s in seqs]
            prep = self.method.prepare(self.raw_model, ids, sup, train_cfg=cfg, seeds=seeds)
            counts += prep.counts
            prepared.append((prep, seqs))
        if self.world > 1:
            dist.all_reduce(counts)
        # DDP averages gradients over ranks; scale so the result is the global mean.
        scale = float(self.world)
        totals = [[0.0, 0, 0, 0] for _ in range(self.slots)]
        loss_value = 0.0
        head = self.target.head()
        for m, (prep, seqs) in enumerate(prepared):
            aux, final = self._target_outputs(prep.input_ids, seqs)
            kind = "cuda" if self.device.startswith("cuda") else "cpu"
            autocast = torch.autocast(kind, dtype=torch.bfloat16, enabled=self.bf16)
            with autocast, self._grad_sync(last=m == len(prepared) - 1):
                loss, stats = self.method.loss(
                    self.model,
                    self.raw_model,
                    prep,
                    aux=aux.float() if not self.device.startswith("cuda") else aux,
                    teacher=Teacher(final, head),
                    normalizer=counts.tolist(),
                    train_cfg=cfg,
                )
                (loss * scale).backward()
            loss_value += float(loss.detach())
            for k, st in enumerate(resolved(stats)):  # one transfer, once backward is queued
                totals[k][0] += st.loss_sum
                totals[k][1] += st.positions
                totals[k][2] += st.correct
                totals[k][3] += st.in_vocab
        if self.world > 1:  # log the global figures, not rank 0's share
            packed = torch.tensor(
                [loss_value, *[x for t in totals for x in t]], dtype=torch.float64
            )
            dist.all_reduce(packed)
            loss_value = float(packed[0])
            totals = packed[1:].view(self.slots, 4).tolist()
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in self.raw_model.parameters() if p.requires_grad], cfg.clip
        )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.stream is not None:  # each rank's own spool: no rank waits for another
            for m in range(cfg.grad_accum):
                self.stream.done(self.batches_done + m)
        self.batches_done += cfg.grad_accum
        self.step += 1
        return {
            "step": self.step,
            "loss": round(loss_value, 6),
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": round(float(getattr(grad_norm, "full_tensor", lambda: grad_norm)()), 6),
            "per_step_loss": [round(t[0] / max(t[1], 1), 6) for t in totals],
            "per_step_acc": [round(t[2] / max(t[3], 1), 6) for t in totals],
            "draft_vocab_coverage": round(totals[0][3] / max(totals[0][1], 1), 6),
            "trained_positions": int(counts[0]),
        }

    def train(self, on_step: Callable[[StepMetrics], None] | None = None) -> list[StepMetrics]:
        metrics = MetricsWriter(self.cfg, self.step, self.rank)  # + TensorBoard, W&B, MLflow
        history = []
        start = time.time()
        while self.step < self.cfg.steps:
            row = self._train_step()
            row["elapsed_s"] = round(time.time() - start, 3)
            row["acceptance_estimate"] = acceptance_estimate(row["per_step_acc"])
            checkpoint = self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps
            m = StepMetrics.from_dict({**row, "checkpoint": checkpoint})
            history.append(m)
            metrics.write(m.to_dict())
            if on_step:
                on_step(m)
            if checkpoint:
                self.save_checkpoint()
        return history

    def _drafter_config(self) -> dict:
        return {"method": self.raw_model.config.method, **self.raw_model.config.to_dict()}

    def save_checkpoint(self) -> None:
        # A collective: every rank writes its own shard, rank 0 commits and prunes.
        config = {
            **self._drafter_config(),
            "eyas_version": __version__,
            "target_dir": str(self.cfg.target),
            "vocab": self.vocab_info,
        }
        state = {
            "step": self.step,
            "batches_done": self.batches_done,
            "world_size": self.world,
            "fsdp": self.sharded,
            "eyas_version": __version__,
        }
        save_sharded(
            self.ckpt_root,
            self.step,
            self.raw_model,
            self.optimizer,
            self.scheduler,
            state,
            config,
            self.cfg.keep_last,
            self.rank,
        )

    def finish(self) -> Path:
        """Write OUT/drafter (the export input) and the training manifest."""
        out = self.cfg.out / "drafter"
        weights, _ = full_state(self.raw_model, None, self.sharded)  # collective under FSDP2
        if self.rank == 0:
            # the frozen target tensors as the target has them, not the bf16 copies FSDP2
            # training held (the export's validator compares the embedding with the target's)
            source = {
                "embed_tokens.weight": self.target.embedding,
                "lm_head.weight": self.target.head,
            }
            for name in frozen_names(self.raw_model):
                # (a frozen EAGLE-3 draft head is the target's rows, not its head: kept as is)
                if name in source and weights[name].dtype == torch.bfloat16:
                    whole = source[name]()
                    if whole.shape == weights[name].shape:
                        weights[name] = whole.detach().float().cpu()
            save_drafter(
                self.raw_model,
                out,
                {
                    "eyas_version": __version__,
                    "target_dir": str(self.cfg.target),
                    "train_config": json.loads(self.cfg.model_dump_json()),
                    "vocab": self.vocab_info,
                    "data": {
                        **self.data_report.as_dict(),
                        "max_len": self.max_len,
                        "quarantine": str(self.quarantine_file) if self.quarantine_file else None,
                        "source": self.source,
                        "target_tensors_loaded": self.target.loaded_tensors,
                    },
                    "steps": self.step,
                },
                weights,
            )
        return out

    def cleanup(self, failed: bool = False) -> None:
        if getattr(self, "stream", None) is not None:
            self.stream.stop(finished=self.step >= self.cfg.steps)
        if self.world > 1 and dist.is_initialized():
            if not failed:  # a failed rank must not wait for ranks that may never arrive
                dist.barrier()
            dist.destroy_process_group()


def run_train(
    cfg: TrainConfig,
    log: Callable[[str], None] = print,
    on_step: Callable[[StepMetrics], None] | None = None,
) -> TrainResult:
    cfg.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log)
    failed = True
    try:  # a failed setup also leaves the process group
        trainer.setup()
        history = trainer.train(on_step)
        out = trainer.finish()
        failed = False
        return TrainResult(drafter=out, steps=trainer.step, history=history)
    finally:
        trainer.cleanup(failed)
