"""SGLang's own code, from its released wheels (0.5.12.post1 and 0.5.23; `sglang_source`), run on
eyas's exports: the rope it builds from the exported `rope_scaling`
(`srt/layers/rotary_embedding/factory.py` `get_rope` -> `yarn.py` `YaRNScalingRotaryEmbedding`),
the layers it captures for the exported ids (`set_eagle3_layers_to_capture` of the target's
model file: llama.py, qwen3.py, deepseek_v2.py, kimi_k25.py) and how it parses a DFlash config
(`srt/speculative/dflash_utils.py` `parse_dflash_draft_config`). These are the rules
`eyas.backends.sglang.conventions` and `eyas.drafter.rope` restate."""

import math
import types

import pytest
import torch
from sglang_source import VERSIONS, captured, load, method_of, sglang_get_rope

from eyas.backends.sglang import conventions as sglang
from eyas.drafter.rope import engine_magnitudes, inv_freq_and_mscale, rope_config_fields
from test_real_kimi_layout import KIMI_K25_CONFIG

KIMI_YARN = KIMI_K25_CONFIG["text_config"]["rope_scaling"]
KIMI_TOY_YARN = {
    "type": "yarn",
    "factor": 4.0,
    "original_max_position_embeddings": 1024,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}
DEEPSEEK = ("sglang/srt/models/deepseek_v2.py", "DeepseekV2ForCausalLM")
LLAMA = ("sglang/srt/models/llama.py", "LlamaForCausalLM")
QWEN3 = ("sglang/srt/models/qwen3.py", "Qwen3ForCausalLM")
KIMI_ARCHS = KIMI_K25_CONFIG["architectures"]


def _sglang_rope(version, scaling, head_dim=128, theta=50000.0):
    get_rope = sglang_get_rope(version)
    return get_rope(head_dim, head_dim, 262144, theta, True, dict(scaling), torch.float32)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("raw", [KIMI_YARN, KIMI_TOY_YARN], ids=["kimi", "kimi_toy"])
def test_sglang_serves_the_exported_rope_as_trained(version, raw):
    """eyas trains Kimi's rope at transformers' magnitude (1.0 for the mscale pair); SGLang
    builds the exported keys into the same table, before and after it learned the pair."""
    exported = rope_config_fields(50000.0, raw)["rope_scaling"]
    rope = _sglang_rope(version, exported)
    inv, magnitude = inv_freq_and_mscale(128, 50000.0, raw)
    assert type(rope).__name__ == "YaRNScalingRotaryEmbedding"
    assert math.isclose(rope.mscale, magnitude, rel_tol=1e-6) and magnitude == 1.0
    positions = torch.tensor([0, 1, 7, 1023, 1024, 4095, 4096, 65536, 262143])
    positions = positions[positions < len(rope.cos_sin_cache)]  # factor x original positions
    angles = positions.float()[:, None] * inv
    mine = torch.cat([angles.cos() * magnitude, angles.sin() * magnitude], -1)
    bound = positions.float()[:, None] * 2.0**-22 + 1e-6  # engine_parity's rope tolerance
    assert ((rope.cos_sin_cache[positions] - mine).abs() <= bound).all()


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_reads_kimis_own_keys_as_eyas_restates_it(version):
    """Kimi's `rope_scaling` as written (the case eyas's export rewrites): 1.416 on 0.5.12.post1,
    1.0 on 0.5.23 (`engine_magnitudes`, which the docs' table is made from)."""
    want = engine_magnitudes(KIMI_YARN)[
        "sglang<=0.5.15" if version < "0.5.16" else "sglang>=0.5.16"
    ]
    assert math.isclose(_sglang_rope(version, {**KIMI_YARN, "rope_type": "yarn"}).mscale, want)
    assert math.isclose(want, 1.0 if version == "0.5.23" else 0.1 * math.log(64) + 1)
    with_attn = {**KIMI_YARN, "rope_type": "yarn", "attn_factor": 0.5}
    assert math.isclose(
        _sglang_rope(version, with_attn).mscale,
        engine_magnitudes(with_attn)["sglang<=0.5.15" if version < "0.5.16" else "sglang>=0.5.16"],
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_captures_the_exported_layers_on_every_model(version):
    """eyas's ids, run through each model's own `set_eagle3_layers_to_capture`."""
    kimi = sglang.to_sglang_layer_ids([2, 30, 58], KIMI_ARCHS)
    assert kimi == [1, 29, 57]
    for file, cls in (DEEPSEEK, LLAMA, QWEN3):
        assert captured(version, file, cls, kimi, 61) == [2, 30, 58], (file, version)
    toy = sglang.to_sglang_layer_ids([1, 2, 3], ["LlamaForCausalLM"])
    for file, cls in (LLAMA, QWEN3):
        assert captured(version, file, cls, toy, 4) == [1, 2, 3]
    # no ids: SGLang's own default, in HF terms
    assert captured(version, *DEEPSEEK, None, 61) == sglang.default_capture_ids(61)


def test_kimi_k25_forwards_to_its_deepseek_v3_model():
    """`KimiK25ForConditionalGeneration.set_eagle3_layers_to_capture` (kimi_k25.py) hands the
    ids to its language model, DeepseekV3ForCausalLM, unchanged."""
    forward = method_of(
        "0.5.23",
        "sglang/srt/models/kimi_k25.py",
        "KimiK25ForConditionalGeneration",
        "set_eagle3_layers_to_capture",
    )
    deepseek = method_of("0.5.23", *DEEPSEEK, "set_eagle3_layers_to_capture")
    lm = types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True),
        config=types.SimpleNamespace(num_hidden_layers=61),
        model=types.SimpleNamespace(),
    )
    lm.set_eagle3_layers_to_capture = lambda ids: deepseek(lm, ids)
    forward(types.SimpleNamespace(language_model=lm), [2, 30, 58])
    assert lm.model.layers_to_capture == [2, 30, 58]


def test_the_first_id_rule_arrived_in_deepseek_v2_only():
    """PR #25454 (SGLang 0.5.13): ids not starting at 1 are the HF index on DeepSeek/Kimi,
    plus one everywhere else and on every model before it; `captured_layers` restates both."""
    for ids in ([0, 1, 2], [1, 29, 57], [2, 30, 58], [3, 7, 11]):
        for file, cls in (DEEPSEEK, LLAMA, QWEN3):
            new = captured("0.5.23", file, cls, ids, 61)
            old = captured("0.5.12.post1", file, cls, ids, 61)
            rule = sglang.FIRST_ID if cls.startswith("Deepseek") else sglang.PLUS_ONE
            assert new == sglang.captured_layers(ids, rule), (cls, ids)
            assert old == sglang.captured_layers(ids, rule, since_first_id=False), (cls, ids)
    # why eyas refuses the Kimi toy's [1, 2, 3]: [0, 1, 2] is read as the HF index from 0.5.13
    assert captured("0.5.23", *DEEPSEEK, [0, 1, 2], 4) == [0, 1, 2]
    assert captured("0.5.12.post1", *DEEPSEEK, [0, 1, 2], 4) == [1, 2, 3]
    with pytest.raises(Exception) as err:
        sglang.to_sglang_layer_ids([1, 2, 3], KIMI_ARCHS)
    assert err.value.reason == "sglang_layer_ids_ambiguous"


def test_third_party_ids_are_read_as_sglang_serves_them_on_kimi():
    """The published layouts: SpecForge/TorchSpec `[1, 29, 57]` (layer outputs) and
    lightseekorg/kimi-k2.5-eagle3-mla `[2, 30, 58]` (the HF index): eyas reads both as what
    SGLang 0.5.23 captures for them on Kimi-K2.5."""
    for ids in ([1, 29, 57], [2, 30, 58]):
        hf, how = sglang.read_layer_ids(ids)
        assert hf == captured("0.5.23", *DEEPSEEK, ids, 61) == [2, 30, 58], how


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_parses_the_exported_dflash_config(version, tmp_path):
    """z-lab's layout as eyas writes it, through `parse_dflash_draft_config` and the target's
    `set_dflash_layers_to_capture` (+ 1): the trained HF layers, block and mask token."""
    from drafter.test_dflash import tiny
    from eyas.export.drafter import export_drafter
    from eyas.jsonl import read_json_object
    from eyas.train.checkpoint import save_drafter

    model = tiny(block=6)
    save_drafter(model, tmp_path / "d", {})
    config = read_json_object(
        export_drafter(tmp_path / "d", "sglang", tmp_path / "e") / "config.json"
    )
    utils = load(version, "sglang/srt/speculative/dflash_utils.py")
    parsed = utils.parse_dflash_draft_config(draft_hf_config=config)
    assert parsed.block_size == 6 and parsed.mask_token_id == model.config.mask_token_id
    ids = list(parsed.target_layer_ids)
    capture = method_of(version, *QWEN3, "set_dflash_layers_to_capture")
    target = types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True), model=types.SimpleNamespace()
    )
    capture(target, ids)
    assert target.model.layers_to_capture == model.config.aux_layer_ids


@pytest.mark.parametrize(("version", "reads"), [("0.5.12.post1", True), ("0.5.23", True)])
def test_sglang_reads_eagle3_1_keys_at_the_top_level(version, reads):
    """`llama_eagle3.py` `LlamaModel.__init__`: `getattr(config, "fc_norm", None)` and
    `getattr(config, "norm_output", False)` (checked present in both wheels; 0.5.11 has
    neither, which is why eyas still refuses the SGLang layout for EAGLE-3.1)."""
    from sglang_source import source_dir

    text = (source_dir() / version / "sglang/srt/models/llama_eagle3.py").read_text()
    assert ('getattr(config, "fc_norm"' in text) is reads
    assert ('getattr(config, "norm_output"' in text) is reads
