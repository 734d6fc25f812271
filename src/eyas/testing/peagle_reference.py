"""eyas's P-EAGLE against speculators 0.9.0's, like for like (issue 39).

Both train from the same initial weights (eyas's, copied), on the same sequences, COD samples,
optimizer (AdamW β=(0.9, 0.95), no weight decay, clip 0.5) and learning rate at every step
(eyas's warmup + cosine), in fp32 on CPU, and compare each step's loss, per-depth accuracy and
every parameter's gradient (before clipping):

- data: prompts rendered with the target's chat template, answered greedily by the target
  (`dflash_reference.sequences`); the answer tokens are supervised, as after `eyas generate`;
- eyas: `PEagleMethod.prepare` (its seeded COD samples) and `.loss` on `PEagleDrafter`, fed by
  `OnlineTarget` (the fused layers and the final, normed state), as `eyas train` runs them;
- speculators: `PEagleDraftModel` built by its trainer's own path (`from_training_args`,
  `speculators_peagle_peer.py`, in its own venv) on the same rows packed as its collator packs
  them after `shift_batch` (index p pairs x_{p+1} with h_p and the last layer's state at p+1
  before the final norm, which it applies itself; one document per row, per-row padding
  inside it), with eyas's COD samples in place of its own draw. Its loss mask is the batch's
  `loss_mask` shifted as its inputs are; here it is given eyas's (the predicted token's
  supervision, `peagle.train`), so both sides train the same elements. Both train eyas's set
  of parameters: the embedding frozen (speculators' `embed_requires_grad` option; its P-EAGLE
  default trains it) and the head started from the target's rows and trained or frozen
  (`draft_head`; speculators freezes it, `DraftVocabMixin._load_verifier_weights`: for a
  trained head the peer unfreezes it).

Losses compare as KL: speculators trains KL(target || draft); eyas the soft cross-entropy,
which is that KL plus the target's entropy (same gradients), so eyas's side subtracts the
entropy of the trained elements before comparing.

`defect` plants a known bug in a copy of eyas's drafter (`DEFECTS`), to show the comparison
catches it: the peer's figures are computed once, from the same initial weights and samples.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import load_file, save_file

from eyas.drafter.eagle3.train import step_mask, step_teacher
from eyas.drafter.loss import Teacher
from eyas.drafter.peagle.model import PEagleDrafter
from eyas.drafter.registry import get_method
from eyas.drafter.ttt_attention import ttt_attention
from eyas.hf_models import target_model
from eyas.testing.dflash_reference import sequences
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer
from eyas.train.target import OnlineTarget

PEER = Path(__file__).with_name("speculators_peagle_peer.py")


@dataclass
class Setup:
    target: Path
    steps: int = 6
    rows: int = 4  # sequences per step
    sequences: int = 8
    new_tokens: int = 24
    depths: int = 4
    max_anchors: int | None = 512  # supervised positions seeding depths >= 1, per sequence
    draft_head: str = "trained"  # or "frozen", speculators' own choice
    lr: float = 3e-3
    warmup_steps: int = 2
    threads: int = 2
    seed: int = 0


class NoChain(PEagleDrafter):
    """A wrong mask: each parallel position sees the context, not the positions before it."""

    def _depth(self, input_ids, hidden, positions, cache):
        return super()._depth(input_ids, hidden, positions, cache[:1])


class NoFinalNorm(PEagleDrafter):
    """A dropped norm: the head reads the layer's output before the final RMSNorm."""

    def _depth(self, input_ids, hidden, positions, cache):
        out, k, v = self.midlayer(self.embed_tokens(input_ids), hidden, positions, cache)
        return out, k, v


class NoHiddenNorm(PEagleDrafter):
    """A dropped norm: the fused state enters the attention without `hidden_norm`."""

    def _depth(self, input_ids, hidden, positions, cache):
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(self.embed_tokens(input_ids)), hidden], -1)
        q, k, v = layer.self_attn.project(x, positions)
        steps = [*cache, (k, v)]
        scale = layer.self_attn.d**-0.5
        out = layer.self_attn.output(ttt_attention(q, *steps[0], steps[1:], scale))
        h = hidden + out
        h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h), k, v


DEFECTS: dict[str, type[PEagleDrafter]] = {
    "no_chain": NoChain,
    "no_final_norm": NoFinalNorm,
    "no_hidden_norm": NoHiddenNorm,
}


def train_config(setup: Setup, work: Path) -> TrainConfig:
    return TrainConfig(
        target=setup.target,
        out=work / "eyas",
        data=work,
        method="peagle",
        steps=setup.steps,
        lr=setup.lr,
        warmup_steps=setup.warmup_steps,
        peagle={"depths": setup.depths, "max_anchors": setup.max_anchors},
        eagle3={"draft_head": setup.draft_head},
        seed=setup.seed,
    )


def _batch(setup: Setup, seqs, s: int) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    rows = [(s * setup.rows + j) % len(seqs) for j in range(setup.rows)]
    t = max(len(seqs[r][0]) for r in rows)
    ids = torch.zeros(len(rows), t, dtype=torch.long)
    sup = torch.zeros(len(rows), t, dtype=torch.long)
    for j, r in enumerate(rows):
        n = len(seqs[r][0])
        ids[j, :n], sup[j, :n] = torch.tensor(seqs[r][0]), torch.tensor(seqs[r][1])
    return rows, ids, sup


def eyas_side(
    setup: Setup, work: Path, seqs, defect: str | None = None, steps: int | None = None
) -> tuple[dict, list[dict], dict]:
    """Train eyas's P-EAGLE (with `defect` planted, if named); write the peer's inputs.
    (spec, per-step figures, info)."""
    cfg = train_config(setup, work)
    method = get_method("peagle")
    tmodel = target_model(setup.target)
    aux_layers = method.default_aux_layers(tmodel.num_layers, cfg)
    online = OnlineTarget(setup.target, aux_layers)
    vocab = {
        "d2t": torch.zeros(tmodel.vocab_size, dtype=torch.long),
        "t2d": torch.ones(tmodel.vocab_size, dtype=torch.bool),
        "draft_vocab_size": tmodel.vocab_size,
        "mask_token_id": method.mask_token_id(
            tmodel, cfg, [SimpleNamespace(ids=s[0]) for s in seqs]
        ),
    }
    dcfg = method.build_config(
        target=tmodel,
        train_cfg=cfg,
        aux_layers=aux_layers,
        vocab=vocab,
        max_positions=tmodel.context_length,
    )
    torch.manual_seed(setup.seed)
    model = method.build_model(dcfg)
    head = online.head()
    method.init_from_target(model, embedding=online.embedding(), head=head, vocab=vocab)
    if defect is not None:
        planted = DEFECTS[defect](dcfg)
        planted.load_state_dict(model.state_dict())
        model = planted
    norm = tmodel.load_tensors("norm")[0]["norm"].float()
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file({**init, "verifier_norm.weight": norm}, str(work / "init.safetensors"))
    last_layer = online.model.get_decoder().layers[-1]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=setup.lr, betas=(0.9, 0.95), weight_decay=0.0)
    factors = [Trainer._lr_factor(SimpleNamespace(cfg=cfg), s) for s in range(setup.steps)]
    peer: dict[str, torch.Tensor] = {}
    figures, row_len = [], []
    model.train()
    seen: dict[str, torch.Tensor] = {}  # the last layer's output: before the final norm
    last_layer.register_forward_hook(
        lambda _m, _a, out: seen.setdefault("pre", out[0] if isinstance(out, tuple) else out)
    )
    for s in range(steps or setup.steps):
        rows, ids, sup = _batch(setup, seqs, s)
        seen.clear()
        aux, final = online(ids, None)
        prep = method.prepare(
            model, ids, sup, train_cfg=cfg, seeds=[setup.seed * 7919 + s * 131 + j for j in rows]
        )
        for g in opt.param_groups:
            g["lr"] = setup.lr * factors[s]
        t0 = time.perf_counter()
        teacher = Teacher(final, head)
        loss, stats = method.loss(
            model,
            model,
            prep,
            aux=aux.float(),
            teacher=teacher,
            normalizer=prep.counts.tolist(),
            train_cfg=cfg,
        )
        loss.backward()
        grads = {
            n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for n, p in model.named_parameters()
            if p.requires_grad
        }
        torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        sampled = prep.extra["sampled"]
        entropy = _entropy(teacher, sup, sampled)
        figures.append(
            {
                "seconds": seconds,
                "loss": float(loss.detach()) - entropy / max(float(prep.counts.sum()), 1.0),
                "correct": [st.correct for st in stats],
                "total": [st.positions for st in stats],
                "grads": grads,
            }
        )
        seeds = [setup.seed * 7919 + s * 131 + j for j in rows]
        _pack(peer, s, ids, sup, aux, seen["pre"], sampled, seeds)
        row_len.append(ids.shape[1])
    save_file(peer, str(work / "steps.safetensors"))
    spec = {
        "verifier": str(setup.target),
        "steps": steps or setup.steps,
        "lr": setup.lr,
        "lr_factors": factors,
        "clip": cfg.clip,
        "threads": setup.threads,
        "config": dcfg.to_dict(),
        "row_len": row_len,
        "cod": {
            "ratio": cfg.peagle.down_sample_ratio,
            "ratio_min": cfg.peagle.down_sample_ratio_min,
            "max_anchors": cfg.peagle.max_anchors,
        },
    }
    (work / "spec.json").write_text(json.dumps(spec))
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    return spec, figures, {"trainable": trainable, "mask_token_id": dcfg.mask_token_id}


def _entropy(teacher: Teacher, sup: torch.Tensor, sampled: list) -> float:
    """Σ over the trained elements of H(the target's distribution): soft CE − this = KL."""
    with torch.no_grad():
        logp = torch.log_softmax(teacher.final.float() @ teacher.head.float().t(), -1)
        ent = -(logp.exp() * logp).sum(-1)  # [B, T] at every target position
        total = float((step_teacher(ent[..., None], 0)[..., 0] * step_mask(sup, 0)).sum())
        for d, (rows, anchors) in enumerate(sampled, start=1):
            total += float(ent[rows, anchors + 1 + d].sum())
    return total


def _pack(peer, s, ids, sup, aux, pre, sampled, seeds) -> None:
    """Step s's rows as one packed row as speculators' collator and `shift_batch` lay it out
    (index p: x_{p+1}, h_p, the pre-norm last-layer state at p+1), one document per row, with
    eyas's loss mask and COD samples at their packed positions."""
    b, t = ids.shape
    inputs = torch.cat([ids[:, 1:], ids[:, -1:]], 1)
    shifted_pre = torch.cat([pre[:, 1:], torch.zeros_like(pre[:, :1])], 1)
    anchors = [torch.arange(b * t)]
    depth = [torch.zeros(b * t, dtype=torch.long)]
    for d, (rows, a) in enumerate(sampled, start=1):
        anchors.append(rows * t + a)
        depth.append(torch.full_like(a, d))
    peer.update(
        {
            f"{s}.input_ids": inputs.flatten(),
            f"{s}.loss_mask": step_mask(sup, 0).long().flatten(),
            f"{s}.document_ids": torch.arange(b).repeat_interleave(t),
            f"{s}.hidden_states": aux.flatten(0, 1).contiguous(),
            f"{s}.verifier_last_hidden_states": shifted_pre.flatten(0, 1).contiguous(),
            f"{s}.anchor_pos": torch.cat(anchors),
            f"{s}.depth": torch.cat(depth),
            f"{s}.row_seeds": torch.tensor(seeds, dtype=torch.long),
        }
    )


def peer_side(spec_python: Path, work: Path) -> dict:
    run = subprocess.run(
        [str(spec_python), str(PEER), str(work)], capture_output=True, text=True, timeout=1800
    )
    if run.returncode != 0 or "JSON" not in run.stdout:
        raise RuntimeError(f"speculators peer failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    out = json.loads(run.stdout.rsplit("JSON", 1)[1])
    for s, step in enumerate(out["steps"]):
        step["grads"] = load_file(str(work / f"grads-{s}.safetensors"))
    out["own_cod"] = load_file(str(work / "own_cod.safetensors"))
    return out


def same_samples(work: Path, own: dict[str, torch.Tensor], steps: int) -> bool:
    """Whether speculators' own sampler, from eyas's seeds, drew eyas's COD samples."""
    mine = load_file(str(work / "steps.safetensors"))
    for s in range(steps):
        deep = mine[f"{s}.depth"] > 0
        ours = sorted(
            zip(mine[f"{s}.anchor_pos"][deep].tolist(), mine[f"{s}.depth"][deep].tolist())
        )
        theirs = sorted(zip(own[f"{s}.anchor_pos"].tolist(), own[f"{s}.depth"].tolist()))
        if ours != theirs:
            return False
    return True


def compare(ours: list[dict], theirs: list[dict]) -> dict:
    """Per step: |Δ loss| and |Δ loss| / loss, the largest |Δ gradient| over all parameters
    (absolute and relative to that parameter's largest gradient), per-depth |Δ correct|."""
    rel, absolute, grad_abs, grad_rel, acc, counts_equal = [], [], [], [], [], True
    for a, b in zip(ours, theirs):
        absolute.append(abs(a["loss"] - b["loss"]))
        rel.append(absolute[-1] / max(abs(b["loss"]), 1e-12))
        counts_equal &= a["total"] == b["total"]
        acc.append(max((abs(x - y) for x, y in zip(a["correct"], b["correct"])), default=0))
        worst_abs = worst_rel = 0.0
        for name, g in b["grads"].items():
            mine = a["grads"].get(name)
            if mine is None or mine.shape != g.shape:
                worst_abs = worst_rel = float("inf")
                continue
            diff = float((mine - g).abs().max())
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / max(float(g.abs().max()), 1e-12))
        grad_abs.append(worst_abs)
        grad_rel.append(worst_rel)
    return {
        "max_abs_loss_diff": max(absolute),
        "max_rel_loss_diff": max(rel),
        "rel_loss_diff_by_step": rel,
        "max_abs_grad_diff": max(grad_abs),
        "max_rel_grad_diff": max(grad_rel),
        "max_depth_correct_diff": max(acc),
        "depth_counts_equal": counts_equal,
        "same_parameters": all(set(a["grads"]) == set(b["grads"]) for a, b in zip(ours, theirs)),
    }


def run(setup: Setup, work: Path, spec_python: Path, defects: tuple[str, ...] = ()) -> dict:
    """The comparison, and with `defects` the first step of each planted bug against the same
    peer figures."""
    work.mkdir(parents=True, exist_ok=True)
    seqs = sequences(setup)
    _, ours, info = eyas_side(setup, work, seqs)
    peer = peer_side(spec_python, work)
    planted = {}
    for name in defects:
        scratch = work / f"defect-{name}"
        scratch.mkdir(exist_ok=True)
        _, bad, _ = eyas_side(setup, scratch, seqs, defect=name, steps=1)
        planted[name] = compare(bad, peer["steps"][:1])
    strip = [{k: v for k, v in step.items() if k != "grads"} for step in ours]
    return {
        "eyas": strip,
        "speculators": [{k: v for k, v in st.items() if k != "grads"} for st in peer["steps"]],
        "trainable_equal": peer["trainable"] == info["trainable"],
        "trainable": info["trainable"],
        "cod_samples_equal": same_samples(work, peer["own_cod"], len(ours)),
        "mask_token_id": info["mask_token_id"],
        "defects": planted,
        **compare(ours, peer["steps"]),
    }
