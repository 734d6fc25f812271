"""EAGLE-3 and EAGLE-3.1 through the method interface: the incremental decode equals the TTT
forward it was trained with, EAGLE-3.1's two fixes change what they must, and its layouts are
written and read in the keys vLLM, speculators and SGLang (0.5.12 on, when the user says so)
use."""

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.drafter.load import exported_config, load_drafter
from eyas.drafter.registry import get_method, method_of
from eyas.errors import RefusedError
from eyas.export.drafter import export_drafter
from eyas.export.validate import check_export
from eyas.train.checkpoint import save_drafter

V, H = 48, 32


def tiny(v31: bool, seed: int = 0) -> Eagle3Drafter:
    torch.manual_seed(seed)
    cfg = Eagle3Config(
        hidden_size=H,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=V,
        draft_vocab_size=40,
        target_hidden_size=H,
        aux_layer_ids=[1, 2, 3],
        fc_norm=v31,
        norm_output=v31,
        rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    )
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        model.d2t.copy_(torch.arange(40) // 5)  # draft id i -> target id i + i // 5
        model.t2d.zero_()
        model.t2d[model.draft_to_target()] = True
    return model


def assert_reads_back(model: Eagle3Drafter, export_dir) -> None:
    """The export loads as an EAGLE-3.1 drafter computing what `model` does (bf16 weights)."""
    back = load_drafter(export_dir)
    assert back.config.fc_norm and back.config.norm_output
    ids, aux = torch.randint(0, V, (1, 6)), torch.randn(1, 6, 3 * H)
    with torch.no_grad():
        want = [model.logits(h) for h in model(ids, aux, 3)]
        got = [back.logits(h) for h in back(ids, aux, 3)]
    assert all(torch.allclose(g, w, atol=0.15) for g, w in zip(got, want))


@pytest.mark.parametrize("v31", [False, True])
def test_incremental_chain_equals_the_ttt_forward(v31):
    """Draft from every context length j: the proposer's k-th distribution is the TTT forward's
    step-k distribution at index j when the sequence continues with the drafted tokens, and the
    drafts are sampled from exactly those distributions (so offline acceptance measures the
    trained model)."""
    model = tiny(v31)
    proposer_of = method_of(model).proposer
    t, k = 14, 4
    ids = torch.randint(0, V, (1, t))  # index j reads x_{j+1}
    aux = torch.randn(1, t, 3 * H)
    gen = torch.Generator().manual_seed(0)
    for j in (0, 3, 8):
        proposer = proposer_of(model)
        for piece in (slice(0, j // 2 + 1), slice(j // 2 + 1, j + 1)):  # in two extends
            if piece.stop > piece.start:
                proposer.extend(ids[0, piece].tolist(), aux[:, piece])
        drafts, qs = proposer.propose(k, 1.0, gen)
        forced = ids.clone()
        forced[0, j + 1 : j + k] = torch.tensor(drafts[: k - 1])
        with torch.no_grad():
            steps = model(forced, aux, k)
        for s in range(k):
            want = torch.zeros(V)
            want[model.draft_to_target()] = torch.softmax(model.logits(steps[s])[0, j], -1)
            assert torch.allclose(qs[s], want, atol=1e-5), (j, s)
        # greedy drafting picks each step's argmax of the same distributions
        greedy, none = proposer.propose(k, 0.0, None)
        assert none is None and greedy[0] == int(qs[0].argmax())


def test_eagle3_1_options_are_the_two_fixes():
    """fc_norm normalises each fused layer (so scaling one layer's states changes nothing);
    norm_output feeds the post-norm state to the next TTT step."""
    base, fixed = tiny(False), tiny(True)
    aux = torch.randn(1, 5, 3 * H)
    scaled = aux.clone()
    scaled[..., H : 2 * H] *= 7.0
    with torch.no_grad():
        assert torch.allclose(fixed.fuse(aux), fixed.fuse(scaled), atol=1e-4)
        assert not torch.allclose(base.fuse(aux), base.fuse(scaled), atol=1e-2)
        ids = torch.randint(0, V, (1, 5))
        normed, fed = fixed.step(ids, fixed.fuse(aux), torch.arange(5), [])
        assert torch.equal(normed, fed)
        normed, fed = base.step(ids, base.fuse(aux), torch.arange(5), [])
        assert not torch.allclose(normed, fed)


def test_eagle3_1_writes_the_speculators_keys_vllm_reads_and_sglang_only_when_it_can(tmp_path):
    model = tiny(True)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    cfg = json.loads((out / "config.json").read_text())
    # vllm/transformers_utils/configs/speculators/algos.py update_eagle3 copies these two
    assert cfg["speculators_model_type"] == "eagle3"
    assert cfg["fc_norm"] is True and cfg["norm_output"] is True
    layer = cfg["transformer_layer_config"]
    assert layer["rope_scaling"]["rope_type"] == "yarn" and layer["head_dim"] == H // 4
    weights = load_file(str(out / "model.safetensors"))
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= set(weights)
    assert check_export(out)["method"] == "eagle3.1"
    # SGLang: only for a version that reads fc_norm and norm_output (0.5.12 on)
    for version in (None, "0.5.11"):
        with pytest.raises(RefusedError) as err:
            export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang", engine_version=version)
        assert err.value.reason == "export_unsupported" and "llama_eagle3.py" in err.value.detail
        assert "--engine-version" in err.value.detail
        assert not (tmp_path / "sglang" / "config.json").exists()
    assert_reads_back(model, out)  # the export reads back as the same drafter


def test_a_third_party_eagle3_1_speculators_drafter_loads(tmp_path):
    """What speculators saves for EAGLE-3.1 (`layers.0.*`, `fc_norm.{i}.*`, an Eagle3Speculator
    config with `fc_norm` and `norm_output`) loads in `eyas eval`'s loader, read as vLLM reads
    it, and computes what the drafter computes."""
    model = tiny(True, seed=3)
    weights = {k.replace("midlayer.", "layers.0."): v for k, v in model.state_dict().items()}
    (tmp_path / "t").mkdir()
    save_file(weights, str(tmp_path / "t" / "model.safetensors"))
    c = model.config
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": {
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": H,
            "intermediate_size": 64,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": V,
            "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": c.rope_theta,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
        },
        "draft_vocab_size": 40,
        "norm_before_residual": False,
        "fc_norm": True,
        "norm_output": True,
        "target_hidden_size": H,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
    }
    (tmp_path / "t" / "config.json").write_text(json.dumps(config))
    theirs = load_drafter(tmp_path / "t")
    assert theirs.config.method == "eagle3.1" and theirs.config.rope_scaling["factor"] == 4.0
    ids, aux = torch.randint(0, V, (1, 7)), torch.randn(1, 7, 3 * H)
    with torch.no_grad():
        for a, b in zip(model(ids, aux, 3), theirs(ids, aux, 3)):
            assert torch.allclose(model.logits(a), theirs.logits(b), atol=1e-6)
    # and the option vLLM reads but eyas does not train is refused by name, not ignored
    with pytest.raises(Exception, match="norm_before_fc"):
        exported_config({**config, "norm_before_fc": True})


def test_registry_names_and_defaults():
    assert get_method("eagle3").default_aux_layers(61) == [2, 30, 58]
    assert get_method("eagle3.1").default_aux_layers(4) == [1, 2, 3]
    with pytest.raises(Exception, match="method"):
        get_method("eagle4")


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23", "0.5.12.post1"])
def test_eagle3_1_for_sglang_names_its_version_and_reads_back(tmp_path, version):
    """The SGLang layout of an EAGLE-3.1 drafter: `fc_norm` and `norm_output` at the top level
    (where `llama_eagle3.py` reads them), `fc_norm.{i}.weight` tensors, the lowest SGLang
    that serves it recorded; it validates and loads back as the same drafter."""
    model = tiny(True, seed=5)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "sglang", tmp_path / "s", engine_version=version)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["fc_norm"] is True and cfg["norm_output"] is True
    assert cfg["eyas"]["min_sglang_version"] == "0.5.12"
    assert {f"fc_norm.{i}.weight" for i in range(3)} <= set(
        load_file(str(out / "model.safetensors"))
    )
    assert check_export(out)["method"] == "eagle3.1"
    assert_reads_back(model, out)
    # plain EAGLE-3 needs no version and writes neither key
    plain = tiny(False)
    save_drafter(plain, tmp_path / "p", {})
    cfg = json.loads(
        (export_drafter(tmp_path / "p", "sglang", tmp_path / "ps") / "config.json").read_text()
    )
    assert "fc_norm" not in cfg and "min_sglang_version" not in cfg["eyas"]


def test_an_sglang_drafter_with_legacy_aux_norm_names_loads(tmp_path):
    """Older SGLang drafters set `use_aux_norm` and name the norms `aux_norm_{low,mid,high}`
    (`llama_eagle3.py` `legacy_name_map`): read as fc_norm.{0,1,2}."""
    model = tiny(True, seed=6)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "sglang", tmp_path / "s", engine_version="0.5.23")
    cfg = json.loads((out / "config.json").read_text())
    cfg["use_aux_norm"] = cfg.pop("fc_norm")
    (out / "config.json").write_text(json.dumps(cfg))
    names = dict(enumerate(("aux_norm_low", "aux_norm_mid", "aux_norm_high")))
    weights = load_file(str(out / "model.safetensors"))
    for i, old in names.items():
        weights[f"{old}.weight"] = weights.pop(f"fc_norm.{i}.weight")
    save_file(weights, str(out / "model.safetensors"))
    back = load_drafter(out)
    assert back.config.fc_norm
    for i in range(3):
        assert torch.equal(
            back.fc_norm[i].weight, model.fc_norm[i].weight.to(torch.bfloat16).float()
        )


def _whole_vocab(v31: bool) -> Eagle3Drafter:
    """`tiny` with the draft vocabulary the whole target vocabulary (the default for targets of
    at most 65,536 tokens): an identity mapping."""
    torch.manual_seed(3)
    cfg = dataclasses.replace(tiny(v31).config, draft_vocab_size=V)
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
        model.t2d.fill_(True)
    return model


@pytest.mark.parametrize(
    ("fmt", "version", "v31"),
    [
        ("vllm", None, False),
        ("vllm", None, True),
        ("sglang", None, False),  # EAGLE-3.1 for SGLang needs a version (test above)
        ("sglang", "0.5.23", False),
        ("sglang", "0.5.23", True),
    ],
)
def test_a_whole_vocabulary_export_ships_no_mapping_and_reads_back(tmp_path, fmt, version, v31):
    """vLLM's draft classes have no `draft_id_to_target_id` when the draft vocabulary is the
    target's and refuse a shipped d2t (`vllm.ships_draft_to_target`); SGLang reads a missing
    one as the identity. eyas's loader fills the identity back in."""
    model = _whole_vocab(v31)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", fmt, tmp_path / "e", engine_version=version)
    assert not {"d2t", "t2d"} & set(load_file(str(out / "model.safetensors")))
    check_export(out)
    back = load_drafter(out)
    assert torch.equal(back.draft_to_target(), torch.arange(V)) and bool(back.t2d.all())
    # a reduced vocabulary keeps its mapping, which both engines need
    save_drafter(tiny(v31), tmp_path / "r", {})
    reduced = export_drafter(tmp_path / "r", fmt, tmp_path / "re", engine_version=version)
    assert {"d2t", "t2d"} <= set(load_file(str(reduced / "model.safetensors")))


def test_export_check_refuses_a_mapping_on_a_whole_vocabulary_vllm_export(tmp_path):
    """The defect of issue 35 planted: d2t/t2d beside a whole-vocabulary head."""
    model = _whole_vocab(False)
    save_drafter(model, tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "e")
    weights = load_file(str(out / "model.safetensors"))
    weights.update(d2t=torch.zeros(V, dtype=torch.long), t2d=torch.ones(V, dtype=torch.bool))
    save_file(weights, str(out / "model.safetensors"))
    with pytest.raises(RefusedError) as err:
        check_export(out)
    assert err.value.reason == "invalid_export" and "draft_id_to_target_id" in err.value.detail
