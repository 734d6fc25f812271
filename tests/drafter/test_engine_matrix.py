"""The export matrix: every configuration eyas can write, loaded by each engine's own code.

Cells: every registered method (`eyas.drafter.registry.METHODS`: a method added later joins)
x attention (MHA, MLA) x draft vocabulary (reduced; the target's whole, once the default for targets
of at most 65,536 tokens) x target (the Llama toy, the Kimi-K2.5-layout toy, the real
SmolLM2-135M's config) x engine (vLLM 0.32's classes in its venv; SGLang 0.5.12.post1's and
0.5.23's classes from their wheels). A cell is written and served as trained, or refused by
eyas with the reason the test expects; none is skipped.

**vLLM.** One process builds every export with vLLM's own classes (`vllm_parity_probe.py` over
`eyas/backends/vllm/loader_probe.py`, the code `eyas export check` runs, with the server
`eyas eval --backend vllm` starts: `loader.loader_case`) and computes one draft step: loaded,
every parameter filled (but the embedding and head vLLM shares from the target into a drafter
that ships none), the trained layers fused, `draft_id_to_target_id` present exactly for a
reduced vocabulary, and the rotary table, `fc` input and logits of eyas's training forward
(engine_parity's tolerance). Three planted defects run in the same process: issue 35's d2t
beside a whole vocabulary and a tensor no parameter takes (vLLM refuses both) and a reduced
vocabulary without d2t (vLLM serves draft id i as target id i). `eyas export check`'s
restatement of vLLM's loader (`loader.restated_problems`, for when no vLLM is importable)
agrees with the real loader on every one of these exports.

**SGLang.** `LlamaForCausalLMEagle3` (`llama_eagle3.py`) and `Eagle3DeepseekV2ForCausalLM`
(`kimi_k25_eagle3.py`) run their own `__init__` / `load_weights` on the export, with stand-ins
only for GPU building blocks (tests/backends/test_sglang_eagle3_1.py, test_sglang_source.py):
every weight filled, no tensor dropped, `hot_token_id` None for a whole vocabulary (its draft
ids are target ids) and eyas's map for a reduced one; the Llama class's first draft step is
eyas's. DFlash's z-lab layout goes through SGLang's own `parse_dflash_draft_config` and the
target's `set_dflash_layers_to_capture`; its model class (`models/dflash.py`) is built on
SGLang's kernels and does not run here, so its tensors are held to eyas's validator.
"""

from __future__ import annotations

import json
import shutil
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from engine_parity import (
    SIDES,
    Built,
    Shape,
    build_drafter,
    inputs_for,
    mismatches,
    run_vllm_batch,
    side_of,
    whole_vocab,
)
from pydantic import ValidationError
from safetensors.torch import load_file, save_file

from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import loader
from eyas.drafter.load import load_drafter
from eyas.drafter.registry import METHODS, get_method
from eyas.errors import EyasError
from eyas.export.drafter import export_drafter
from eyas.export.validate import ExportError, check_export
from eyas.hf_models import target_model
from eyas.train.checkpoint import save_drafter

# SGLang's source helpers live with the backend tests (imported under the names they have
# there, so one module object serves both)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
from sglang_source import VERSIONS, load, method_of
from test_sglang_eagle3_1 import sglang_drafter, sglang_first_step
from test_sglang_source import QWEN3, sglang_mla_load

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.real]

TARGETS = ("toy_tiny", "kimi_toy", "smollm2")
MLA_TARGETS = ("kimi_toy",)  # DeepSeek-V3 text model: kv_lora_rank, qk_rope_head_dim
REDUCED = {"toy_tiny": 400, "kimi_toy": 400, "smollm2": 8000}
ENGINES = ("vllm", *(f"sglang-{v}" for v in VERSIONS))


@dataclass(frozen=True)
class Cell:
    method: str
    attention: str
    vocab: str  # "reduced" | "whole"
    target: str

    @property
    def id(self) -> str:
        return f"{self.method}-{self.attention}-{self.vocab}-{self.target}"


CELLS = [
    Cell(m, a, v, t)
    for m in METHODS
    for a in ("mha", "mla")
    for v in ("reduced", "whole")
    for t in TARGETS
]


def eyas_refusal(cell: Cell) -> str | None:
    """What refuses to build the cell's drafter (None: eyas builds it)."""
    if cell.attention not in get_method(cell.method).attentions():
        return f"{cell.method} has no {cell.attention} drafter"
    if cell.attention == "mla" and cell.target not in MLA_TARGETS:
        return "bad_drafter_shape"
    return None


SGLANG_LESS = {"peagle"}  # no parallel-drafting EAGLE in SGLang 0.5.23 (docs/peagle.md)


def sglang_refusal(cell: Cell, version: str) -> str | None:
    """The reason eyas refuses an SGLang export of a built cell (None: it writes one).
    EAGLE-3.1 needs `llama_eagle3.py` 0.5.12 (`EAGLE3_1_SINCE`) and `kimi_k25_eagle3.py`
    0.5.23 (`EAGLE3_1_MLA_SINCE`), DFlash2 `DFlash2DraftModel` 0.5.19, P-EAGLE none; on a DeepSeek/Kimi target a first fused HF layer of 1 has no
    SGLang id from 0.5.13 on (the toy's 4 layers fuse HF 1, 2, 3)."""
    if cell.method in SGLANG_LESS:
        return "export_unsupported"
    if cell.method == "dflash2":  # `models/dflash.py` DFlash2DraftModel (`DFLASH2_SINCE`)
        if not sglang.version_at_least(version, sglang.DFLASH2_SINCE):
            return "export_unsupported"
        return None
    if not cell.method.startswith("eagle3"):
        return None
    since = sglang.EAGLE3_1_MLA_SINCE if cell.attention == "mla" else sglang.EAGLE3_1_SINCE
    if cell.method == "eagle3.1" and not sglang.version_at_least(version, since):
        return "export_unsupported"
    if cell.target == "kimi_toy" and sglang.version_at_least(version, sglang.FIRST_ID_SINCE):
        return "sglang_layer_ids_unservable"
    return None


def _reason(exc: Exception) -> str:
    return exc.reason if isinstance(exc, EyasError) else str(exc)


@dataclass
class Written:
    cell: Cell
    shape: Shape | None = None
    model: torch.nn.Module | None = None
    refused: str | None = None  # eyas's refusal to build the drafter
    exports: dict | None = None  # engine -> export dir, or the reason eyas refused it


@pytest.fixture(scope="module")
def targets(toy_tiny, kimi_toy, smollm2) -> dict[str, Path]:
    return {"toy_tiny": toy_tiny, "kimi_toy": kimi_toy, "smollm2": smollm2}


@pytest.fixture(scope="module")
def written(module_tmp, targets) -> dict[str, Written]:
    """Every cell built the trainer's way and exported for every engine."""
    root = module_tmp("matrix")
    out = {}
    for cell in CELLS:
        w = out[cell.id] = Written(cell)
        train = {"attention": cell.attention}
        # the whole vocabulary asked for by size: no longer the default (drafter/vocab.py)
        train["draft_vocab"] = (
            REDUCED[cell.target] if cell.vocab == "reduced" else whole_vocab(targets[cell.target])
        )
        w.shape = Shape(
            cell.target,
            targets[cell.target],
            train=train,
            language_model_only=cell.target == "kimi_toy",
        )
        tmp = root / cell.id
        try:
            w.model = build_drafter(w.shape, cell.method, tmp)
        except (EyasError, ValidationError) as exc:
            w.refused = _reason(exc)
            continue
        save_drafter(w.model, tmp / "drafter", {"target_dir": str(w.shape.target)})
        w.exports = {}
        for engine in ENGINES:
            fmt, _, version = engine.partition("-")
            try:
                w.exports[engine] = export_drafter(
                    tmp / "drafter",
                    fmt,
                    tmp / engine,
                    w.shape.target,
                    engine_version=version or None,
                )
            except EyasError as exc:
                w.exports[engine] = exc.reason
        shutil.rmtree(tmp / "drafter")  # exported; the matrix's checkpoints alone are gigabytes
    return out


def _planted(written: dict[str, Written], root: Path) -> dict[str, tuple[Written, Path]]:
    """Three defects planted in copies of the Llama toy's EAGLE-3 vLLM exports."""
    whole = written[Cell("eagle3", "mha", "whole", "toy_tiny").id]
    reduced = written[Cell("eagle3", "mha", "reduced", "toy_tiny").id]
    v = whole.model.config.vocab_size

    def plant(source: Written, name: str, change) -> tuple[Written, Path]:
        folder = root / name
        shutil.copytree(source.exports["vllm"], folder)
        weights = load_file(str(folder / "model.safetensors"))
        change(weights)
        save_file(weights, str(folder / "model.safetensors"))
        return source, folder

    return {
        # issue 35: the mapping beside a whole-vocabulary head
        "d2t_on_whole": plant(
            whole,
            "d2t_on_whole",
            lambda w: w.update(d2t=torch.zeros(v, dtype=torch.long), t2d=torch.ones(v).bool()),
        ),
        "no_d2t_on_reduced": plant(
            reduced, "no_d2t_on_reduced", lambda w: (w.pop("d2t"), w.pop("t2d"))
        ),
        "unknown_tensor": plant(
            whole, "unknown_tensor", lambda w: w.update({"extra.weight": torch.zeros(4)})
        ),
    }


@pytest.fixture(scope="module")
def vllm_run(module_tmp, written, vllm_python):
    """One vLLM process for every vLLM export of the matrix and the planted defects:
    {name: (written, export dir, inputs, what vLLM made of it, its tensors)}."""
    root = module_tmp("vllm-matrix")
    runs = {
        cid: (w, w.exports["vllm"])
        for cid, w in written.items()
        if w.exports and isinstance(w.exports["vllm"], Path)
    }
    runs.update(_planted(written, root / "planted"))
    specs, inputs = [], {}
    for name, (w, folder) in runs.items():
        inputs[name] = inputs_for(w.shape, w.model)
        probe = root / "probe" / name  # beside the export, never in it (vLLM reads every file)
        specs.append(
            _spec(Built(w.model, folder, w.shape, w.cell.method, "vllm"), inputs[name], probe)
        )
    version, results = run_vllm_batch(vllm_python, specs, root)
    shutil.rmtree(root / "probe")  # the results are in memory; the probes' tensors are not needed
    return version, {
        name: (*runs[name], inputs[name], *result) for name, result in zip(runs, results)
    }


def _spec(built: Built, inputs: dict, tmp: Path) -> dict:
    """The probe spec: the server `eyas eval --backend vllm` and `eyas export check` start for
    the export (`loader.loader_case`), the inputs, and the target's tensors the proposer
    shares into a drafter that ships none."""
    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(tmp / "inputs.safetensors"))
    cfg = json.loads((built.export / "config.json").read_text())
    case = loader.loader_case(
        built.export, cfg, get_method(built.method), target_model(built.shape.target)
    )
    shipped = set(load_file(str(built.export / "model.safetensors")))
    sd = built.model.state_dict()
    shared = {
        vllm_name: sd[name].contiguous()
        for name, vllm_name in (
            ("embed_tokens.weight", loader.SHARED_FROM_TARGET["embedding"]),
            ("lm_head.weight", loader.SHARED_FROM_TARGET["lm_head"]),
        )
        if name not in shipped and name in sd
    }
    if shared:
        save_file(shared, str(tmp / "shared.safetensors"))
    return {
        **case,
        "method": side_of(built.method),
        "inputs": str(tmp / "inputs.safetensors"),
        "out": str(tmp / "vllm.safetensors"),
        "shared": str(tmp / "shared.safetensors") if shared else None,
    }


# -- the cells ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_eyas_builds_the_cell_or_refuses_it_with_its_reason(written, cell):
    w = written[cell.id]
    expected = eyas_refusal(cell)
    if expected is None:
        assert w.refused is None, (cell.id, w.refused)
        d = w.model.config
        whole = cell.vocab == "whole" or not get_method(cell.method).uses_draft_vocab()
        assert getattr(d, "draft_vocab_size", d.vocab_size) == (
            d.vocab_size if whole else REDUCED[cell.target]
        )
        assert getattr(d, "attention", "mha") == cell.attention
    elif expected == "bad_drafter_shape":
        assert w.refused == "bad_drafter_shape", (cell.id, w.refused)
    else:  # a method without that attention: the config refuses the flag
        assert w.refused is not None and cell.attention in w.refused.lower(), (cell.id, w.refused)


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_vllm_loads_the_cell_as_trained(vllm_run, written, cell):
    w = written[cell.id]
    if w.refused is not None:
        assert cell.id not in vllm_run[1]  # nothing written, nothing served
        return
    assert isinstance(w.exports["vllm"], Path), (cell.id, w.exports["vllm"])
    _, folder, inputs, meta, theirs = vllm_run[1][cell.id]
    assert meta["loaded"], (cell.id, meta.get("error"))
    d = w.model.config
    reduced = getattr(d, "draft_vocab_size", d.vocab_size) != d.vocab_size
    # issue 35: vLLM has a draft_id_to_target_id exactly for a reduced vocabulary, and the
    # export ships d2t exactly then
    assert meta["has_draft_id_to_target_id"] is reduced
    assert ("d2t" in load_file(str(folder / "model.safetensors"))) is reduced
    assert loader.loader_problems("0", meta, d.aux_layer_ids) == [], cell.id
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == d.aux_layer_ids
    ours = SIDES[side_of(cell.method)](w.model, inputs)
    assert mismatches(ours, theirs, inputs["rope_positions"]) == [], cell.id


def test_vllm_refuses_or_misreads_the_planted_defects(vllm_run):
    version, runs = vllm_run
    issue_35 = runs["d2t_on_whole"][3]
    assert not issue_35["loaded"]
    assert "no module or parameter named 'draft_id_to_target_id'" in issue_35["error"]
    unknown = runs["unknown_tensor"][3]
    assert not unknown["loaded"] and "no module or parameter named 'extra'" in unknown["error"]
    # no d2t for a reduced vocabulary: loaded, its mapping left at zeros (draft id i served
    # as target id i), so the logits land on other tokens than eyas's
    w, _, inputs, meta, theirs = runs["no_d2t_on_reduced"]
    assert meta["loaded"], meta["error"]
    assert "draft_id_to_target_id" in meta["unfilled"]
    problems = mismatches(SIDES["eagle3"](w.model, inputs), theirs, inputs["rope_positions"])
    assert any(p.startswith("logits") for p in problems)
    for name in ("d2t_on_whole", "unknown_tensor", "no_d2t_on_reduced"):
        assert loader.loader_problems(version, runs[name][3], None), name


def test_export_checks_restatement_agrees_with_vllms_loader(vllm_run):
    """For every export vLLM built (or refused): the check without vLLM (eyas's restatement,
    `loader.restated_problems` and the method's tensor rule) fails exactly where the real
    loader refuses or misloads."""
    version, runs = vllm_run
    for name, (w, folder, _, meta, _) in runs.items():
        real = loader.loader_problems(version, meta, w.model.config.aux_layer_ids)
        try:
            summary = check_export(folder, w.shape.target)
            restated = []
            assert summary["engine_loader"]["ran"] is False
        except ExportError as exc:
            restated = exc.problems
        assert bool(real) == bool(restated), (name, real, restated)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.id)
def test_sglang_loads_the_cell_as_trained_or_eyas_refuses_it(written, cell, version):
    w = written[cell.id]
    if w.refused is not None:
        return  # test_eyas_builds_...: no drafter, no export for any engine
    got = w.exports[f"sglang-{version}"]
    expected = sglang_refusal(cell, version)
    if expected is not None:
        assert got == expected, (cell.id, version, got)
        return
    assert isinstance(got, Path), (cell.id, version, got)
    cfg = json.loads((got / "config.json").read_text())
    tensors = load_file(str(got / "model.safetensors"))
    d = w.model.config
    reduced = getattr(d, "draft_vocab_size", d.vocab_size) != d.vocab_size
    arch = cfg["architectures"]
    if arch == [sglang.EAGLE3_ARCHITECTURE]:
        shell, loaded = sglang_drafter(version, got)
        assert loaded == {n for n, _ in shell.named_parameters()}, cell.id
        _hot_tokens(shell.hot_token_id, w.model, reduced)
        exported = load_drafter(got).float()
        aux = torch.randn(1, len(d.aux_layer_ids) * d.target_hidden_size)
        with torch.no_grad():
            logits, fed = sglang_first_step(shell, 5, aux)
            normed, want_fed = exported.step(
                torch.tensor([[5]]), exported.fuse(aux[None]), torch.arange(1), []
            )
            want = exported.logits(normed)[0]
        assert torch.allclose(logits, want, atol=1e-4 * max(1.0, float(want.abs().max())))
        assert torch.allclose(fed, want_fed[0], atol=1e-4 * max(1.0, float(fed.abs().max())))
    elif arch == [sglang.EAGLE3_MLA_ARCHITECTURE]:
        built, loaded, hot, warned = sglang_mla_load(version, cfg, tensors)
        assert not warned and set(loaded) == built, (cell.id, built ^ set(loaded))
        _hot_tokens(hot, w.model, reduced)
    elif arch in ([sglang.DFLASH_ARCHITECTURE], [sglang.DFLASH2_ARCHITECTURE]):
        utils = load(version, "sglang/srt/speculative/dflash_utils.py")
        parsed = utils.parse_dflash_draft_config(draft_hf_config=cfg)
        assert parsed.block_size == d.block_size and parsed.mask_token_id == d.mask_token_id
        if arch == [sglang.DFLASH2_ARCHITECTURE]:  # what DFlash2DraftModel.__init__ reads
            keys = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
            assert [getattr(parsed, k) for k in keys] == [getattr(d, k) for k in keys]
            assert parsed.selector_rank  # DFlash2DraftModel refuses a config without one
        capture = method_of(version, *QWEN3, "set_dflash_layers_to_capture")
        target = types.SimpleNamespace(
            pp_group=types.SimpleNamespace(is_last_rank=True), model=types.SimpleNamespace()
        )
        capture(target, list(parsed.target_layer_ids))
        assert target.model.layers_to_capture == d.aux_layer_ids
        assert not {"d2t", "t2d"} & set(tensors)
        check_export(got, w.shape.target, engine="sglang")
    else:
        raise AssertionError(f"{cell.id}: no SGLang loader check for architecture {arch}")


def _hot_tokens(hot: torch.Tensor | None, model, reduced: bool) -> None:
    """SGLang's `hot_token_id` (d2t + arange): eyas's draft -> target map for a reduced
    vocabulary; None (draft ids are target ids) for a whole one."""
    if reduced:
        assert hot is not None and torch.equal(hot, model.draft_to_target())
    else:
        assert hot is None


def test_the_matrix_covers_every_method_and_engine(written):
    """Every registered method has served cells on vLLM and on SGLang, but the one SGLang has
    no class for (P-EAGLE: `SGLANG_LESS`), whose every SGLang cell is refused."""
    for name in METHODS:
        served = [
            engine
            for w in written.values()
            if w.cell.method == name and w.exports
            for engine, got in w.exports.items()
            if isinstance(got, Path)
        ]
        assert "vllm" in served, name
        assert any(e.startswith("sglang") for e in served) == (name not in SGLANG_LESS), name
