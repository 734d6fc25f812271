"""eyas's DFlash and DFlash2 against speculators 0.9.0's, like for like (issues 32, 39).

Both train from the same initial weights (eyas's, copied), on the same sequences, anchors,
optimizer (AdamW β=(0.9, 0.95), no weight decay, clip 0.5) and learning rate at every step
(eyas's warmup + cosine), in fp32 on CPU:

- data: prompts rendered with the target's chat template, answered greedily by the target
  (transformers); the answer tokens are supervised, as after `eyas generate`;
- eyas: `DFlashMethod.prepare` (its seeded anchors) and `.loss` on `DFlashDrafter`, fed by
  `OnlineTarget` (the fused layers and the final, normed state), as `eyas train` runs them;
- speculators: `DFlashDraftModel` or `DFlash2DraftModel` (`speculators_dflash_peer.py`, in its
  own venv) on the same
  rows packed as its collator packs them (document ids, per-document positions, the last
  layer before the final norm, which it applies itself), with eyas's anchors. Each row is
  padded by a block of loss-masked positions of document -1, as eyas's right padding is, so a
  block that runs past its sequence trains the same (no) slots on both sides.

Losses compare as KL: speculators trains KL(target || draft); eyas the soft cross-entropy,
which is that KL plus the target's entropy (same gradients), so eyas's side subtracts the
weighted entropy before comparing (DFlash2's selector term is a hard cross-entropy on both
sides). Per-slot accuracy is argmax agreement on both sides (DFlash2: the selector's pick
among the unary top K, teacher-forced, summed over the slots: speculators reports no per-slot
figure of it). The gradients of the first step (same weights, same batch, before clipping)
are written by both sides and compared tensor by tensor.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import torch
from safetensors.torch import save_file
from torch import nn

from eyas.drafter.dflash.train import slot_targets, slot_weights
from eyas.drafter.loss import Teacher
from eyas.drafter.registry import get_method
from eyas.hf_models import target_model
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer
from eyas.train.target import OnlineTarget

PEER = Path(__file__).with_name("speculators_dflash_peer.py")
PROMPTS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how a bicycle works.",
    "List three prime numbers and add them.",
    "Translate 'good morning' into Spanish.",
    "Why is the sky blue?",
    "Give me a recipe for pancakes.",
    "What does a compiler do?",
    "Summarise the plot of a detective story.",
    "How many legs does a spider have?",
    "Describe a sunset in one paragraph.",
    "What is 17 times 23?",
    "Name a famous painter and one painting.",
    "How do plants make food?",
    "Write a python function that reverses a list.",
    "What is the boiling point of water?",
]


@dataclass
class Setup:
    target: Path
    steps: int = 20
    rows: int = 4  # sequences per step
    sequences: int = 16
    new_tokens: int = 40
    draft_layers: int = 1
    block_size: int = 4
    max_anchors: int = 8
    lr: float = 3e-3
    warmup_steps: int = 2
    threads: int = 2
    seed: int = 0
    method: str = "dflash"  # or dflash2


def sequences(setup: Setup) -> list[tuple[list[int], list[int]]]:
    """(ids, supervised) per prompt: the rendered prompt, then the target's greedy answer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(setup.target)
    lm = AutoModelForCausalLM.from_pretrained(setup.target, dtype=torch.float32).eval()
    out = []
    for i in range(setup.sequences):
        prompt = PROMPTS[i % len(PROMPTS)] + (
            f" ({i // len(PROMPTS)})" if i >= len(PROMPTS) else ""
        )
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        with torch.no_grad():
            gen = lm.generate(
                torch.tensor([ids]),
                max_new_tokens=setup.new_tokens,
                do_sample=False,
                pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else 0,
            )[0].tolist()
        out.append((gen, [0] * len(ids) + [1] * (len(gen) - len(ids))))
    return out


def train_config(setup: Setup, work: Path) -> TrainConfig:
    return TrainConfig(
        target=setup.target,
        out=work / "eyas",
        data=work,
        method=setup.method,
        steps=setup.steps,
        lr=setup.lr,
        warmup_steps=setup.warmup_steps,
        draft_layers=setup.draft_layers,
        dflash={"block_size": setup.block_size, "max_anchors": setup.max_anchors},
        seed=setup.seed,
    )


def eyas_side(
    setup: Setup, work: Path, seqs, mutate: Callable[[nn.Module], None] | None = None
) -> tuple[dict, list[dict], dict]:
    """Train eyas's DFlash; write the peer's inputs. (config, per-step figures, state).
    `mutate` plants a defect in eyas's model after its initial weights are written."""
    cfg = train_config(setup, work)
    method = get_method(setup.method)
    tmodel = target_model(setup.target)
    aux_layers = method.default_aux_layers(tmodel.num_layers, cfg)
    online = OnlineTarget(setup.target, aux_layers)
    mask = method.mask_token_id(tmodel, cfg, [SimpleNamespace(ids=s[0]) for s in seqs])
    dcfg = method.build_config(
        target=tmodel,
        train_cfg=cfg,
        aux_layers=aux_layers,
        vocab={"mask_token_id": mask},
        max_positions=tmodel.context_length,
    )
    torch.manual_seed(setup.seed)
    model = method.build_model(dcfg)
    method.init_from_target(model, embedding=online.embedding(), head=online.head(), vocab={})
    norm = tmodel.load_tensors("norm")[0]["norm"].float()
    init = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file({**init, "verifier_norm.weight": norm}, str(work / "init.safetensors"))
    if mutate is not None:
        mutate(model)
    head = online.head()
    last_layer = online.model.get_decoder().layers[-1]
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=setup.lr, betas=(0.9, 0.95), weight_decay=0.0)
    factors = [Trainer._lr_factor(SimpleNamespace(cfg=cfg), s) for s in range(setup.steps)]
    bs = dcfg.block_size
    peer: dict[str, torch.Tensor] = {}
    figures = []
    model.train()
    seen: dict[str, torch.Tensor] = {}  # the last layer's output: before the final norm
    last_layer.register_forward_hook(
        lambda _m, _a, out: seen.setdefault("pre", out[0] if isinstance(out, tuple) else out)
    )
    for s in range(setup.steps):
        rows = [(s * setup.rows + j) % len(seqs) for j in range(setup.rows)]
        t = max(len(seqs[r][0]) for r in rows)
        ids = torch.zeros(len(rows), t, dtype=torch.long)
        sup = torch.zeros(len(rows), t, dtype=torch.long)
        for j, r in enumerate(rows):
            n = len(seqs[r][0])
            ids[j, :n], sup[j, :n] = torch.tensor(seqs[r][0]), torch.tensor(seqs[r][1])
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
        if s == 0:
            _save_grads(model, work / "grads.eyas.safetensors")
        torch.nn.utils.clip_grad_norm_(params, cfg.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        anchors, valid = prep.extra["anchors"], prep.extra["valid"]
        entropy = _weighted_entropy(teacher, sup, anchors, valid, bs, cfg.dflash.gamma)
        correct = [st.correct for st in stats]
        figures.append(
            {
                "seconds": seconds,
                "loss": float(loss.detach()) - entropy / max(float(prep.counts.sum()), 1.0),
                "correct": correct if setup.method == "dflash" else [sum(correct)],
                "total": [st.positions for st in stats],
            }
        )
        _pack(peer, s, ids, sup, aux, seen["pre"], rows, seqs, anchors, valid, bs)
    save_file(peer, str(work / "steps.safetensors"))
    spec = {
        "method": setup.method,
        "verifier": str(setup.target),
        "steps": setup.steps,
        "lr": setup.lr,
        "lr_factors": factors,
        "clip": cfg.clip,
        "gamma": cfg.dflash.gamma,
        "selector_loss_alpha": cfg.dflash2.selector_loss_alpha,
        "threads": setup.threads,
        "config": dcfg.to_dict(),
    }
    (work / "spec.json").write_text(json.dumps(spec))
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    return spec, figures, {"trainable": trainable, "mask_token_id": mask, "aux": aux_layers}


def _save_grads(model, path: Path) -> None:
    save_file(
        {
            n: p.grad.detach().contiguous()
            for n, p in model.named_parameters()
            if p.grad is not None
        },
        str(path),
    )


def grad_diffs(work: Path, peer: Path | None = None) -> dict[str, dict[str, float]]:
    """Per trainable tensor: the largest |eyas - speculators| of the first step's gradient and
    the largest |gradient| (speculators'); a tensor with a gradient on one side only differs by
    inf. eyas's are in `work`, the peer's in `peer` (default: `work` too)."""
    from safetensors.torch import load_file

    ours = load_file(str(work / "grads.eyas.safetensors"))
    theirs = load_file(str((peer or work) / "grads.speculators.safetensors"))
    out = {}
    for n in sorted(set(ours) | set(theirs)):
        both = n in ours and n in theirs
        out[n] = {
            "max_abs_diff": float((ours[n] - theirs[n]).abs().max()) if both else float("inf"),
            "max_abs": float((theirs[n] if n in theirs else ours[n]).abs().max()),
        }
    return out


def max_rel(grads: dict[str, dict[str, float]]) -> float:
    """The largest gradient difference of a tensor over that tensor's largest gradient."""
    return max(g["max_abs_diff"] / max(g["max_abs"], 1e-12) for g in grads.values())


def _weighted_entropy(teacher, sup, anchors, valid, bs, gamma) -> float:
    """Σ over trained slots of w · H(target distribution): soft CE − this = KL."""
    pos, mask = slot_targets(sup, anchors, valid, bs)
    with torch.no_grad():
        hid = teacher.final.gather(
            1, pos.flatten(1)[..., None].expand(-1, -1, teacher.final.shape[-1])
        )
        logp = torch.log_softmax(hid.float() @ teacher.head.float().t(), -1)
        ent = -(logp.exp() * logp).sum(-1).view_as(pos)
        w = slot_weights(ent, mask, weighting="decay", gamma=gamma, alpha=0.5)
    return float((w * ent * mask).sum())


def _pack(peer, s, ids, sup, aux, pre, rows, seqs, anchors, valid, bs) -> None:
    """Step s's rows as one packed row (speculators' collator), each followed by a block of
    loss-masked document -1 positions; eyas's anchors at their packed positions."""
    t = ids.shape[1]
    width = t + bs
    b = ids.shape[0]
    p_ids = torch.zeros(b, width, dtype=torch.long)
    p_mask = torch.zeros(b, width, dtype=torch.long)
    p_doc = torch.full((b, width), -1, dtype=torch.long)
    p_aux = torch.zeros(b, width, aux.shape[-1])
    p_pre = torch.zeros(b, width, pre.shape[-1])
    for j, r in enumerate(rows):
        n = len(seqs[r][0])
        p_ids[j, :t], p_mask[j, :t], p_doc[j, :n] = ids[j], sup[j], j
        p_aux[j, :t], p_pre[j, :t] = aux[j], pre[j]
    picked = [int(a) + j * width for j in range(b) for a, v in zip(anchors[j], valid[j]) if v]
    peer.update(
        {
            f"{s}.input_ids": p_ids.flatten(),
            f"{s}.loss_mask": p_mask.flatten(),
            f"{s}.document_ids": p_doc.flatten(),
            f"{s}.position_ids": torch.arange(width).repeat(b),
            f"{s}.hidden_states": p_aux.flatten(0, 1).contiguous(),
            f"{s}.verifier_last_hidden_states": p_pre.flatten(0, 1).contiguous(),
            f"{s}.anchors": torch.tensor(picked, dtype=torch.long),
        }
    )


def peer_side(spec_python: Path, work: Path) -> dict:
    run = subprocess.run(
        [str(spec_python), str(PEER), str(work)], capture_output=True, text=True, timeout=1800
    )
    if run.returncode != 0 or "JSON" not in run.stdout:
        raise RuntimeError(f"speculators peer failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    return json.loads(run.stdout.rsplit("JSON", 1)[1])


def compare(ours: list[dict], theirs: list[dict]) -> dict:
    """Per step: |Δ loss| (absolute and / loss), and |Δ correct| as a fraction of the count it
    is of (per slot; DFlash2: one total over the slots)."""
    rel, gap, acc, counts_equal = [], [], [], True
    for a, b in zip(ours, theirs):
        gap.append(abs(a["loss"] - b["loss"]))
        rel.append(gap[-1] / max(abs(b["loss"]), 1e-12))
        counts_equal &= a["total"] == b["total"]
        of = b["total"] if len(a["correct"]) == len(b["total"]) else [sum(b["total"])]
        acc.append(
            max(
                (abs(ca - cb) / max(n, 1) for ca, cb, n in zip(a["correct"], b["correct"], of)),
                default=0.0,
            )
        )
    return {
        "max_rel_loss_diff": max(rel),
        "max_abs_loss_diff": max(gap),
        "rel_loss_diff_by_step": rel,
        "max_slot_acc_diff": max(acc),
        "slot_counts_equal": counts_equal,
    }


def run(
    setup: Setup,
    work: Path,
    spec_python: Path,
    mutants: dict[str, Callable[[nn.Module], None]] | None = None,
) -> dict:
    """Both sides and their comparison; each of `mutants` (a defect planted in a copy of
    eyas's model) is trained again on the same batches and compared with the same peer run."""
    work.mkdir(parents=True, exist_ok=True)
    seqs = sequences(setup)
    _, ours, info = eyas_side(setup, work, seqs)
    peer = peer_side(spec_python, work)
    grads = grad_diffs(work)
    planted = {}
    for name, mutate in (mutants or {}).items():
        (work / name).mkdir(exist_ok=True)
        figures = eyas_side(setup, work / name, seqs, mutate)[1]
        planted[name] = {
            **compare(figures, peer["steps"]),
            "max_grad_rel_diff": max_rel(grad_diffs(work / name, work)),
        }
    return {
        "mutants": planted,
        "eyas": ours,
        "speculators": peer["steps"],
        "grads": grads,
        "max_grad_abs_diff": max(g["max_abs_diff"] for g in grads.values()),
        "max_grad_rel_diff": max_rel(grads),
        "trainable_equal": peer["trainable"] == info["trainable"],
        "mask_token_id": info["mask_token_id"],
        "aux_layers": info["aux"],
        **compare(ours, peer["steps"]),
    }
