"""SGLang's own code, from its released wheels (0.5.12.post1 and 0.5.23; `sglang_source`), run on
eyas's exports: the rope it builds from the exported `rope_scaling`
(`srt/layers/rotary_embedding/factory.py` `get_rope` -> `yarn.py` `YaRNScalingRotaryEmbedding`),
the layers it captures for the exported ids (`set_eagle3_layers_to_capture` of the target's
model file: llama.py, qwen3.py, deepseek_v2.py, kimi_k25.py) and how it parses a DFlash config
(`srt/speculative/dflash_utils.py` `parse_dflash_draft_config`). These are the rules
`eyas.backends.sglang.conventions` and `eyas.drafter.rope` restate."""

import ast
import json
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


@pytest.mark.parametrize("hf", [[3, 30, 58], [1, 30, 58], [2, 30, 58], [1, 2, 3]])
def test_a_named_sglang_version_decides_the_ids_on_kimi(hf):
    """With `--engine-version`, ids ambiguous across PR #25454 are written for that SGLang:
    what its own DeepSeek model captures for them is the trained layers, and eyas reads them
    back so; a first HF layer of 1 has no id from 0.5.13 on (refused)."""
    from eyas.errors import RefusedError

    for version in VERSIONS:
        try:
            ids, meta = sglang.layer_id_fields(hf, KIMI_ARCHS, version)
        except RefusedError as err:
            assert err.reason == "sglang_layer_ids_unservable"
            assert hf[0] == 1 and version == "0.5.23"
            continue
        assert captured(version, *DEEPSEEK, ids, 61) == hf, (version, ids)
        back, _ = sglang.read_layer_ids(
            ids, written_by_eyas=True, eyas_rule=meta["sglang_ids_rule"]
        )
        assert back == hf
        assert ("sglang_ids_for_version" in meta) is (hf[0] != 2)  # [2, ...]: every version


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
    neither, which is why eyas exports EAGLE-3.1 for SGLang only with an --engine-version from
    0.5.12 on; `test_sglang_eagle3_1.py` runs that code)."""
    from sglang_source import source_dir

    text = (source_dir() / version / "sglang/srt/models/llama_eagle3.py").read_text()
    assert ('getattr(config, "fc_norm"' in text) is reads
    assert ('getattr(config, "norm_output"' in text) is reads


# --- the MLA EAGLE-3 draft class, read from its source ------------------------------------------

MLA_DRAFT = "sglang/srt/models/kimi_k25_eagle3.py"
# the classes the draft class builds its modules from, and the file each is defined in
MLA_PARTS = {
    "Eagle3MLAModel": MLA_DRAFT,
    "Eagle3MLADecoderLayer": MLA_DRAFT,
    "DeepseekV2AttentionMLA": DEEPSEEK[0],
    "DeepseekV2MLP": DEEPSEEK[0],
}
LEAVES = ("Linear", "RMSNorm", "VocabParallelEmbedding", "ParallelLMHead")


def _tree(version: str, relpath: str) -> ast.Module:
    from sglang_source import source_dir

    return ast.parse((source_dir() / version / relpath).read_text())


def _class(version: str, relpath: str, name: str) -> ast.ClassDef:
    found = [n for n in _tree(version, relpath).body if isinstance(n, ast.ClassDef)]
    return next(n for n in found if n.name == name)


def _entry_classes(version: str) -> list[str]:
    """The names `EntryClass` lists: what SGLang's model registry serves this file under."""
    for node in _tree(version, MLA_DRAFT).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
        ):
            items = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            return [item.id for item in items]
    raise LookupError("no EntryClass")


def _config_reads(version: str) -> tuple[set[str], set[str]]:
    """(keys read as `config.X`, keys read through `getattr`/`hasattr(config, "X", ...)`)."""
    required, optional = set(), set()
    for node in ast.walk(_tree(version, MLA_DRAFT)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "config"
            and isinstance(node.ctx, ast.Load)
        ):
            required.add(node.attr)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "config"
        ):
            optional.add(node.args[1].value)
    return required - optional, optional


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _parameters(version: str, cls: str, prefix: str, env: dict) -> set[str]:
    """The weights `cls.__init__` builds, by name, read from its source: `self.X = Leaf(...)`
    (a linear, norm, embedding or head) is `X.weight`, a part class is walked into, an `if`
    whose test `env` can evaluate follows that branch (one it cannot, neither), and a local
    alias of a submodule (`attn = self.self_attn`) assigns into it."""
    init = next(
        n
        for n in _class(version, MLA_PARTS.get(cls, MLA_DRAFT), cls).body
        if isinstance(n, ast.FunctionDef) and n.name == "__init__"
    )
    out: set[str] = set()
    aliases = {"self": ""}

    def walk(body):
        for node in body:
            if isinstance(node, ast.If):
                try:
                    test = eval(compile(ast.Expression(node.test), "<if>", "eval"), dict(env))
                except Exception:
                    continue
                walk(node.body if test else node.orelse)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
                if isinstance(target, ast.Name) and isinstance(value, ast.Attribute):
                    if isinstance(value.value, ast.Name) and value.value.id == "self":
                        aliases[target.id] = value.attr + "."
                    continue
                if not (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in aliases
                    and isinstance(value, ast.Call)
                ):
                    continue
                name = prefix + aliases[target.value.id] + target.attr
                callee = _callee(value)
                if callee.endswith(LEAVES):
                    out.add(name + ".weight")
                elif callee in MLA_PARTS:
                    out.update(_parameters(version, callee, name + ".", env))
                elif (
                    callee == "ModuleList"
                    and isinstance(value.args[0], ast.ListComp)
                    and _callee(value.args[0].elt).endswith(LEAVES)
                ):
                    out.update(f"{name}.{i}.weight" for i in range(env["n_aux"]))

    walk(init.body)
    return out


def _mla_export(tmp, kimi_toy, method: str = "eagle3", engine_version: str | None = None):
    """eyas's SGLang MLA export (`export_drafter(..., "sglang")`) of a drafter for Kimi-K2.5's
    real depth and MLA dims: its config and its tensors."""
    from safetensors.torch import load_file

    from drafter.test_mla import _cfg, _real_kimi
    from eyas.drafter.registry import get_method
    from eyas.export.drafter import export_drafter
    from eyas.hf_models import target_model
    from eyas.train.checkpoint import save_drafter

    tmp.mkdir(parents=True, exist_ok=True)
    target = _real_kimi(tmp, kimi_toy)
    m, t = get_method(method), target_model(target)
    d = m.build_config(target=t, train_cfg=_cfg(num_attention_heads=2, intermediate_size=64),
                       aux_layers=m.default_aux_layers(t.num_layers),
                       vocab={"draft_vocab_size": 1500, "d2t": None}, max_positions=4096)  # fmt: skip
    torch.manual_seed(0)
    model = m.build_model(d)
    with torch.no_grad():
        model.embed_tokens.weight.zero_()
        model.d2t.copy_(torch.randint(0, 400, (1500,)).sort().values)
        model.t2d[:1500] = True
    save_drafter(model, tmp / "drafter", {"target_dir": str(target)})
    out = export_drafter(
        tmp / "drafter", "sglang", tmp / "s", target, engine_version=engine_version
    )
    cfg = json.loads((out / "config.json").read_text())
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    return cfg, tensors, model


@pytest.fixture(scope="module")
def sglang_mla_export(module_tmp, kimi_toy):
    return _mla_export(module_tmp("sglang_mla"), kimi_toy)


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_mla_draft_class_serves_eyas_mla_export(version, sglang_mla_export):
    """SGLang's MLA EAGLE-3 draft model (`kimi_k25_eagle3.py`), read with `ast` and run where it
    is pure Python, against eyas's SGLang MLA export: the class its `EntryClass` registers is
    the exported architecture; every config key it reads as `config.X` is in the exported
    config, and the optional ones eyas relies on (`draft_vocab_size`: its own head, not the
    target's; `target_hidden_size`: fc's width; `eagle_config`'s ids: fc's input count) too;
    its `load_weights` (mapping, q_a/kv_a fusion, gate/up stacking, d2t) takes every exported
    tensor into a weight its `__init__` builds, and fills every one of them."""
    _check_mla_export(version, sglang_mla_export)


def test_sglang_0_5_23_mla_class_serves_eyas_eagle3_1_mla_export(tmp_path, kimi_toy):
    """EAGLE-3.1 MLA, exported with --engine-version 0.5.23: the same checks, and its
    `__init__` builds the `fc_norm.{i}` weights (it reads `fc_norm` from the exported config)
    that its `load_weights` fills from eyas's tensors; SGLang 0.5.12 and no version refused."""
    from eyas.errors import RefusedError

    export = _mla_export(tmp_path / "a", kimi_toy, "eagle3.1", "0.5.23")
    cfg = export[0]
    assert cfg["fc_norm"] is True and cfg["norm_output"] is True
    assert cfg["eyas"]["min_sglang_version"] == "0.5.23"
    built = _check_mla_export("0.5.23", export)
    assert {f"model.fc_norm.{i}.weight" for i in range(3)} <= built
    for version in ("0.5.12.post1", None):
        with pytest.raises(RefusedError) as err:
            _mla_export(tmp_path / str(version), kimi_toy, "eagle3.1", version)
        assert err.value.reason == "export_unsupported" and "0.5.23" in err.value.detail


def _aux_count(version: str, cfg: dict) -> int:
    """SGLang's `_get_eagle_aux_layer_count` (sizes fc's input) on the exported config."""
    count_fn = next(
        n
        for n in _tree(version, MLA_DRAFT).body
        if isinstance(n, ast.FunctionDef) and n.name == "_get_eagle_aux_layer_count"
    )
    ns: dict = {"PretrainedConfig": object}  # its annotation
    exec(compile(ast.Module([count_fn], []), MLA_DRAFT, "exec"), ns)
    return ns["_get_eagle_aux_layer_count"](types.SimpleNamespace(**cfg))


def _check_mla_export(version: str, export) -> set[str]:
    """The checks of the test above; returns the weights SGLang's `__init__` builds."""
    from eyas.backends.sglang import conventions as sglang_conv

    cfg, tensors, model = export
    entry = _entry_classes(version)
    assert cfg["architectures"] == entry == [sglang_conv.EAGLE3_MLA_ARCHITECTURE]

    required, optional = _config_reads(version)
    assert {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"} <= required
    assert {"v_head_dim", "num_attention_heads", "intermediate_size", "rms_norm_eps"} <= required
    missing = required - set(cfg)
    assert not missing, f"SGLang {version} reads config.{sorted(missing)}; eyas does not write them"
    assert {"draft_vocab_size", "target_hidden_size", "eagle_config"} <= optional
    assert cfg["draft_vocab_size"] == 1500 and cfg["target_hidden_size"] == cfg["hidden_size"]
    assert cfg["tie_word_embeddings"] is False  # else SGLang's head is the embedding
    # its `_get_eagle_aux_layer_count` sizes fc's input: the exported ids' count
    n_aux = _aux_count(version, cfg)
    assert n_aux == 3 == tensors["fc.weight"].shape[1] // cfg["target_hidden_size"]
    assert isinstance(cfg["q_lora_rank"], int)  # the layer requires it (test below)

    built, loaded, hot_token_id, warned = sglang_mla_load(version, cfg, tensors)
    assert "model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight" in built
    assert "model.midlayer.mlp.gate_up_proj.weight" in built and "lm_head.weight" in built
    assert not warned, warned
    assert set(loaded) == built, (built - set(loaded), set(loaded) - built)
    h, q, kv, rope = cfg["hidden_size"], cfg["q_lora_rank"], cfg["kv_lora_rank"], 64
    assert cfg["qk_rope_head_dim"] == rope
    assert loaded["model.midlayer.self_attn.fused_qkv_a_proj_with_mqa.weight"] == [
        ((q + kv + rope, 2 * h), None)
    ]
    assert sorted(s for _, s in loaded["model.midlayer.mlp.gate_up_proj.weight"]) == [0, 1]
    # d2t becomes the hot-token map: draft id -> target id, as eyas's drafter maps it
    assert torch.equal(hot_token_id, model.draft_to_target())
    return built


def sglang_mla_load(version: str, cfg: dict, tensors: dict):
    """SGLang's MLA draft class (`kimi_k25_eagle3.py`) on an export: the weights its
    `__init__` builds (read from its source with `ast`), the ones its own `load_weights` fills
    from the tensors (name -> [(shape, shard)]), its `hot_token_id` (None without d2t) and
    what it warned. Returns (built, loaded, hot_token_id, warned)."""
    import logging
    import re

    entry = _entry_classes(version)
    n_aux = _aux_count(version, cfg)
    env = {
        "self": types.SimpleNamespace(q_lora_rank=cfg["q_lora_rank"], use_dsa=False),
        "attn": types.SimpleNamespace(q_lora_rank=cfg["q_lora_rank"]),
        "config": types.SimpleNamespace(**cfg),
        "use_fc_norm": bool(cfg.get("fc_norm")),
        "n_aux": n_aux,
    }
    top = _class(version, MLA_DRAFT, entry[0])
    built = set()
    for node in ast.walk(top):  # `self.model = Eagle3MLAModel(...)`, `self.lm_head = ...`
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            target, callee = node.targets[0], _callee(node.value)
            if isinstance(target, ast.Attribute) and callee in MLA_PARTS:
                built |= _parameters(version, callee, target.attr + ".", env)
            elif isinstance(target, ast.Attribute) and callee.endswith(LEAVES):
                built.add(target.attr + ".weight")

    loaded: dict[str, list] = {}

    class Param:
        def __init__(self, name):
            self.name = name

        def weight_loader(self, param, weight, shard=None):
            loaded.setdefault(param.name, []).append((tuple(weight.shape), shard))

    warned: list[str] = []
    logger = logging.getLogger("sglang_mla_test")
    logger.warning = lambda msg, *a: warned.append(msg % a)
    load_weights = method_of(
        version, MLA_DRAFT, entry[0], "load_weights",
        re=re, torch=torch, logger=logger, default_weight_loader=None,
    )  # fmt: skip
    params = {name: Param(name) for name in built}
    fake = types.SimpleNamespace(
        named_parameters=lambda: params.items(), post_load_weights=lambda: None
    )
    load_weights(fake, iter(tensors.items()))
    return built, loaded, getattr(fake, "hot_token_id", None), warned


def test_only_the_newer_sglang_mla_class_reads_eagle3_1_keys():
    """`kimi_k25_eagle3.py` reads `fc_norm` and `norm_output` in 0.5.23 and neither in
    0.5.12.post1 (which drops `fc_norm.*` tensors with a warning and feeds the pre-norm state
    back). The release between them that added the keys is not pinned, so eyas exports
    EAGLE-3.1 MLA for SGLang only for 0.5.23 on (`EAGLE3_1_MLA_SINCE`; the Llama layer's
    `EAGLE3_1_SINCE` is `llama_eagle3.py`'s)."""
    from eyas.drafter.eagle3.export_mla import sglang_config
    from eyas.errors import EyasError

    assert {"fc_norm", "norm_output"} <= _config_reads("0.5.23")[1]
    assert not {"fc_norm", "norm_output"} & _config_reads("0.5.12.post1")[1]
    assert sglang.EAGLE3_1_MLA_SINCE == "0.5.23"
    d = types.SimpleNamespace(fc_norm=True, norm_output=True, norm_before_residual=False,
                              method="eagle3.1")  # fmt: skip
    for version in (None, "0.5.12.post1", "0.5.22"):
        with pytest.raises(EyasError):
            sglang_config(d, None, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_sglang_mla_class_needs_q_lora_and_eyas_refuses_without(version):
    """`Eagle3MLADecoderLayer.__init__` raises for `q_lora_rank` None (a target that projects
    q directly, DeepSeek-V2-Lite), so eyas refuses that SGLang export instead of writing one the
    engine rejects at load."""
    from eyas.drafter.eagle3.export_mla import sglang_config
    from eyas.errors import EyasError

    layer = _class(version, MLA_DRAFT, "Eagle3MLADecoderLayer")
    raises = [
        ast.unparse(n.body[0])
        for n in ast.walk(layer)
        if isinstance(n, ast.If) and "q_lora_rank is None" in ast.unparse(n.test)
    ]
    assert raises and "requires q_lora_rank" in raises[0]
    d = types.SimpleNamespace(fc_norm=False, norm_output=False, norm_before_residual=False,
                              method="eagle3", q_lora_rank=None)  # fmt: skip
    with pytest.raises(EyasError) as err:
        sglang_config(d, None)
    assert "q_lora_rank" in str(err.value)
