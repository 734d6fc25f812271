"""`eyas train`: drafter training, for any registered method (EAGLE-3, EAGLE-3.1, DFlash).

    eyas train --target MODEL_DIR --data runs/x/generate --out runs/x/drafter --steps 2000
    eyas train --method eagle3.1 --target MODEL_DIR --data runs/x/generate --out runs/x/d31
    eyas train --method dflash --block-size 8 --draft-layers 2 --target MODEL_DIR \
        --data runs/x/generate --out runs/x/dflash [--set dflash_weighting=dpace]
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
ranks, checkpoints and metrics. Skeleton: setup (data, vocab, target, drafter, optimizer) /
train / save_checkpoint / cleanup.
Resuming is automatic: rerun the same command and it continues from `OUT/checkpoints/latest`
with model, optimizer, scheduler, RNG and data position restored, reproducing the
uninterrupted loss curve.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from eyas import __version__
from eyas.config import TrainConfig
from eyas.drafter.loss import Teacher
from eyas.drafter.method import DraftMethod, row_seed
from eyas.drafter.registry import get_method
from eyas.drafter.vocab import choose_draft_vocab, token_counts
from eyas.errors import EyasError
from eyas.hf_models import TargetModel, target_model
from eyas.store import quarantined_ids
from eyas.train.checkpoint import (
    full_state,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    save_drafter,
)
from eyas.train.data import (
    Sequence,
    check_token_ids,
    load_captured_sequences,
    load_sequences,
    make_batches,
)
from eyas.train.metrics import MetricsWriter, acceptance_estimate, truncate_metrics
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
        cfg = self.cfg
        if self.world > 1 and not dist.is_initialized():
            dist.init_process_group("nccl" if self.device.startswith("cuda") else "gloo")
            if self.device.startswith("cuda"):
                self.device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
                torch.cuda.set_device(self.device)
        torch.manual_seed(cfg.seed)
        cfg.out.mkdir(parents=True, exist_ok=True)
        self.method: DraftMethod = get_method(cfg.method)
        tmodel = target_model(cfg.target)
        self.max_len = cfg.max_len or tmodel.context_length
        self.stream = None
        self.quarantine_file = None
        if cfg.hidden_states is not None:
            self.seqs, self.data_report, manifest = load_captured_sequences(
                cfg.hidden_states, self.max_len, cfg.length_policy
            )
            self.target = CapturedTarget(cfg.target, manifest, self.device)
        else:
            quarantined, self.quarantine_file = quarantined_ids(
                cfg.data, cfg.quarantine, cfg.include_quarantined
            )
            self.seqs, self.data_report = load_sequences(
                cfg.data, self.max_len, cfg.length_policy, cfg.include_truncated, quarantined
            )
        if not self.seqs:
            raise EyasError(
                "no_training_data",
                f"no usable training samples in {cfg.hidden_states or cfg.data}: "
                f"{self.data_report.as_dict()}",
            )
        check_token_ids(self.seqs, tmodel.vocab_size, cfg.hidden_states or cfg.data)
        if cfg.capture_ahead:
            from eyas.capture.run import capture_layers

            layers, _ = capture_layers(cfg.target, cfg.aux_layers, cfg.method, cfg)
            streamed = {"aux_layers": layers[:-1], "method": cfg.method}
            self.target = CapturedTarget(cfg.target, streamed, self.device)
            self.stream_layers = layers
        elif cfg.hidden_states is None:
            aux = cfg.aux_layers or self.method.default_aux_layers(tmodel.num_layers, cfg)
            self.method.check_aux_layers(aux, tmodel.num_layers)
            dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
            self.target = OnlineTarget(cfg.target, aux, self.device, dtype, cfg.trust_remote_code)
        self._check_fused_layers(tmodel)
        check_token_ids(self.seqs, self.target.vocab_size, cfg.hidden_states or cfg.data)
        vocab = self._vocab(tmodel)
        dcfg = self.method.build_config(
            target=tmodel,
            train_cfg=cfg,
            aux_layers=self.target.aux_layers,
            vocab=vocab,
            max_positions=max(self.max_len, tmodel.context_length),
        )
        model = self.method.build_model(dcfg)
        self.method.init_from_target(
            model, embedding=self.target.embedding(), head=self.target.head(), vocab=vocab
        )
        self.raw_model = model.to(self.device)
        self.model = self._wrap(self.raw_model)
        params = [p for p in self.raw_model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, self._lr_factor)
        self.vocab_info = {k: v for k, v in vocab.items() if k not in ("d2t", "t2d")}
        self.slots = self.method.num_slots(dcfg, cfg)
        self.step = 0
        self.batches_done = 0
        self.ckpt_root = cfg.out / "checkpoints"
        ckpt = latest_checkpoint(self.ckpt_root)
        if ckpt is not None:
            state = load_checkpoint(
                ckpt, self.raw_model, self.optimizer, self.scheduler, self.sharded
            )
            self.step, self.batches_done = state["step"], state["batches_done"]
            self.log(f"resumed from {ckpt.name} (step {self.step})")
            if self.rank == 0:
                truncate_metrics(cfg.out / "metrics.jsonl", self.step)
        if cfg.capture_ahead:
            self._start_stream()

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
                captured_for = getattr(self.target, "captured_for", "eagle3")
                raise EyasError(
                    "capture_layers_mismatch",
                    f"{self.cfg.hidden_states} holds layers {aux} (captured for {captured_for}); "
                    f"--method {self.cfg.method} fuses {fused}: capture again with --method "
                    f"{self.cfg.method} (or --aux-layers {','.join(map(str, fused))}), or train "
                    f"on these layers with --aux-layers {','.join(map(str, aux))}",
                )
        self.method.check_aux_layers(aux, tmodel.num_layers)

    def _start_stream(self) -> None:
        from eyas.backends.policy import ClientPolicy
        from eyas.backends.registry import backend_class, open_pool
        from eyas.capture.run import capture_settings
        from eyas.train.stream import CaptureStream

        cfg = self.cfg
        remote = backend_class(cfg.capture_backend).remote
        if remote and not cfg.capture_urls:
            raise EyasError(
                "bad_flag", f"--capture-backend {cfg.capture_backend} needs --capture-url"
            )
        settings = capture_settings(cfg.target, self.stream_layers, cfg.trust_remote_code)
        policy = ClientPolicy(concurrency=cfg.capture_concurrency, adaptive=remote)

        def pool():  # every --capture-url, under the client policy; closed with the stream
            return open_pool(
                cfg.capture_backend, settings, cfg.capture_urls, policy, operation="capture"
            )

        def global_batch(position: int) -> list[Sequence]:
            return [self.seqs[i] for i in self._global_batch(position)]

        self.stream = CaptureStream(
            cfg.out / "spool",
            global_batch,
            pool,
            cfg.capture_ahead,
            cfg.steps * cfg.grad_accum,
            torch.bfloat16 if self.device.startswith("cuda") else torch.float32,
            self.log,
        )
        if self.rank == 0:
            self.stream.start(self.batches_done)

    @property
    def sharded(self) -> bool:
        return self.world > 1 and self.cfg.fsdp

    def _wrap(self, model: torch.nn.Module):
        if self.world == 1:
            return model
        if self.cfg.fsdp:
            # FSDP2: parameters become DTensor shards in place; the method names the units
            # sharded on their own (decoder layers, a head the loss calls outside forward).
            # Gradients are reduce-scattered as a mean over ranks, like DDP's all-reduce.
            from torch.distributed.fsdp import fully_shard

            for unit in self.method.fsdp_units(model):
                fully_shard(unit)
            sharded = fully_shard(model)
            if self.rank == 0:
                self.log(f"drafter sharded with FSDP2 across {self.world} ranks")
            return sharded
        return torch.nn.parallel.DistributedDataParallel(model)

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
                    [self.cfg.draft_vocab, self.target.vocab_size, [s.id for s in self.seqs]]
                ).encode()
            ).hexdigest()[:16]
            cache = self.cfg.out / f"vocab-{key}.pt"
            if cache.exists():
                vocab = torch.load(cache, weights_only=True)
            else:
                counts = token_counts(
                    ((s.ids, s.supervised) for s in self.seqs), self.target.vocab_size
                )
                vocab = choose_draft_vocab(counts, self.cfg.draft_vocab)
                if self.rank == 0:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    torch.save(vocab, cache)
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
        epoch_batches = make_batches(
            self.seqs, self.cfg.batch_tokens, self.cfg.seed, position // max(1, self._epoch_len())
        )
        return epoch_batches[position % len(epoch_batches)]

    def _batch_at(self, position: int) -> tuple[list[Sequence], float]:
        """This rank's share of global batch `position`, and its loss weight. A rank left
        without sequences still runs one (weight 0) so DDP's collective backward matches."""
        batch = self._global_batch(position)
        mine = [self.seqs[i] for i in batch[self.rank :: self.world]]
        if self.stream is not None:  # this batch's states, from the spool
            rows = self.stream.rows(position)
            mine = [replace(s, source=rows[s.id]) for s in mine]
            if not mine:
                mine = [replace(self.seqs[batch[0]], source=rows[self.seqs[batch[0]].id])]
                return mine, 0.0
        return (mine, 1.0) if mine else ([self.seqs[batch[0]]], 0.0)

    def _epoch_len(self) -> int:
        if not hasattr(self, "_len"):
            self._len = len(make_batches(self.seqs, self.cfg.batch_tokens, self.cfg.seed, 0))
        return self._len

    def _target_outputs(self, ids: torch.Tensor, seqs: list[Sequence]):
        """aux hidden states [B, T, 3H] and final hidden states [B, T, H] of the target (a
        seam for bench_train, which times the drafter step on precomputed target outputs)."""
        return self.target(ids, seqs)

    def _train_step(self) -> dict:
        cfg = self.cfg
        micro = [self._batch_at(self.batches_done + m) for m in range(cfg.grad_accum)]
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
        for prep, seqs in prepared:
            aux, final = self._target_outputs(prep.input_ids, seqs)
            autocast = (
                torch.autocast("cuda", dtype=torch.bfloat16)
                if self.device.startswith("cuda")
                else torch.autocast("cpu", enabled=False)
            )
            with autocast:
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
            for k, st in enumerate(stats):
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
        if self.stream is not None:
            if self.world > 1:
                dist.barrier()  # every rank has read these batches' states
            if self.rank == 0:
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

    def train(self, on_step: Callable[[dict], None] | None = None) -> list[dict]:
        metrics = MetricsWriter(self.cfg, self.step, self.rank)  # + TensorBoard, W&B, MLflow
        history = []
        start = time.time()
        while self.step < self.cfg.steps:
            m = self._train_step()
            m["elapsed_s"] = round(time.time() - start, 3)
            m["acceptance_estimate"] = acceptance_estimate(m["per_step_acc"])
            if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
                m["checkpoint"] = True
            history.append(m)
            metrics.write(m)
            if on_step:
                on_step(m)
            if self.step % self.cfg.checkpoint_every == 0 or self.step == self.cfg.steps:
                self.save_checkpoint()
        return history

    def save_checkpoint(self) -> None:
        # Gathering FSDP2 shards is a collective: every rank joins, rank 0 writes.
        gathered = full_state(self.raw_model, self.optimizer, self.sharded)
        if self.rank != 0:
            return
        save_checkpoint(
            self.ckpt_root,
            self.step,
            self.raw_model,
            self.optimizer,
            self.scheduler,
            {"step": self.step, "batches_done": self.batches_done, "eyas_version": __version__},
            gathered,
        )

    def finish(self) -> Path:
        """Write OUT/drafter (the export input) and the training manifest."""
        out = self.cfg.out / "drafter"
        weights, _ = full_state(self.raw_model, None, self.sharded)  # collective under FSDP2
        if self.rank == 0:
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
                        "source": "captured"
                        if self.cfg.hidden_states
                        else ("streamed" if self.cfg.capture_ahead else "online"),
                        "target_tensors_loaded": self.target.loaded_tensors,
                    },
                    "steps": self.step,
                },
                weights,
            )
        return out

    def cleanup(self) -> None:
        if getattr(self, "stream", None) is not None:
            self.stream.stop(finished=self.step >= self.cfg.steps)
        if self.world > 1 and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


def run_train(
    cfg: TrainConfig,
    log: Callable[[str], None] = print,
    on_step: Callable[[dict], None] | None = None,
) -> Path:
    cfg.out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log)
    trainer.setup()
    try:
        trainer.train(on_step)
        return trainer.finish()
    finally:
        trainer.cleanup()
