"""Contract tests: each engine convention eyas relies on, pinned to the engine's own code.

The rules live in `eyas.backends.sglang.conventions` and `eyas.backends.vllm.conventions`;
these tests restate the engines' code (quoted in each docstring) and check eyas's exports and
loaders against it, so a drafter is served exactly the layers it was trained on.
"""

import json

import pytest

from eyas.backends.sglang import conventions as sglang
from eyas.backends.vllm import conventions as vllm
from eyas.drafter.load import exported_aux_layers, exported_config
from eyas.errors import EyasError


def sglang_captures(config_ids: list[int] | None, num_layers: int) -> list[int]:
    """SGLang's capture rule, as every `set_eagle3_layers_to_capture` in
    `python/sglang/srt/models/` (llama.py, deepseek_v2.py, glm4_moe.py, gpt_oss.py) writes it:

        if layer_ids is None:
            self.model.layers_to_capture = [2, num_layers // 2, num_layers - 3]
        else:
            # we plus 1 here because in sglang, for the ith layer, it takes the output
            # of the (i-1)th layer as aux hidden state
            self.model.layers_to_capture = [val + 1 for val in layer_ids]

    and the model's layer loop (`for i in range(start_layer, end_layer): if i in
    self.layers_to_capture: aux_hidden_states.append(hidden_states + residual)`, before layer
    i runs) captures the residual entering layer i: HF `hidden_states[i]`."""
    if config_ids is None:
        return [2, num_layers // 2, num_layers - 3]
    return [val + 1 for val in config_ids]


def vllm_captures(config: dict) -> list[int]:
    """vLLM's rule: `vllm/v1/worker/gpu_model_runner.py`
    `GPUModelRunner._get_eagle3_aux_layers_from_config`:

        layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
        if layer_ids and isinstance(layer_ids, (list, tuple)):
            return tuple(layer_ids)
        eagle_config = getattr(hf_config, "eagle_config", None)
        ...
        layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")

    with `EagleModelMixin._maybe_add_hidden_state(aux_hidden_states, 0, ...)` before layer 0
    and `idx + 1` after layer idx (`vllm/model_executor/models/interfaces.py`): id i is HF
    `hidden_states[i]`."""
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if not ids:
        ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    return list(ids)


def test_sglang_ids_are_hf_index_minus_one():
    for hf in ([2, 30, 58], [1, 2, 3], [3, 7, 11]):
        written = sglang.to_sglang_layer_ids(hf)
        assert sglang_captures(written, 61) == hf
        assert sglang.from_sglang_layer_ids(written) == hf
    # the published Kimi-K2.5 / DeepSeek-V3 SGLang drafters (SpecForge
    # configs/deepseek-v3-671b-eagle3.json, TorchSpec kimi_k25_eagle3_mla.json) write these
    assert sglang.from_sglang_layer_ids([1, 29, 57]) == [2, 30, 58]
    assert sglang.default_capture_ids(61) == sglang_captures(None, 61) == [2, 30, 58]


def test_the_embedding_output_has_no_sglang_id():
    with pytest.raises(EyasError) as err:
        sglang.to_sglang_layer_ids([0, 1, 2])
    assert err.value.reason == "bad_aux_layers"


def test_vllm_ids_are_the_hf_index():
    """The ids eyas writes, run through vLLM's layer loop (`llama.py` `LlamaModel.forward`:
    `_maybe_add_hidden_state(aux, self.start_layer, ...)` before the first layer, then
    `_maybe_add_hidden_state(aux, idx + 1, ...)` after layer idx), capture HF
    `hidden_states[hf]` (the embedding output is HF index 0, layer i's output index i + 1)."""

    def vllm_layer_loop(ids: list[int], num_layers: int) -> list[int]:
        captured = [0] if 0 in ids else []  # start_layer 0: the embedding output
        for idx in range(num_layers):
            if idx + 1 in ids:
                captured.append(idx + 1)  # HF index of layer idx's output
        return captured

    for hf in ([2, 30, 58], [0, 1, 61], [3, 7, 11]):
        written = vllm.to_vllm_layer_ids(hf)
        assert vllm_layer_loop(vllm_captures({vllm.AUX_IDS_KEY: written}), 61) == hf
        nested = {"eagle_config": {vllm.AUX_IDS_KEY: written}}
        assert vllm_layer_loop(vllm_captures(nested), 61) == hf
        assert vllm.from_vllm_layer_ids(written) == hf


def test_third_party_sglang_kimi_drafter_is_read_in_hf_terms():
    """A SpecForge/TorchSpec-style Kimi-K2.5 SGLang drafter config (no weights needed)."""
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 7168,
        "intermediate_size": 12288,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "head_dim": 128,
        "num_hidden_layers": 1,
        "vocab_size": 163840,
        "draft_vocab_size": 32000,
        "target_hidden_size": 7168,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
    }
    assert exported_aux_layers(config) == [2, 30, 58]
    assert exported_config(config).aux_layer_ids == [2, 30, 58]


def test_speculators_norm_before_residual_defaults_as_vllm_reads_it():
    """`vllm/transformers_utils/configs/speculators/algos.py` `update_eagle3`:

    pre_trained_config["norm_before_residual"] = config_dict.get("norm_before_residual", True)
    """
    layer = {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "vocab_size": 100,
    }
    base = {
        "speculators_model_type": "eagle3",
        "transformer_layer_config": layer,
        "draft_vocab_size": 50,
        "target_hidden_size": 64,
        "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
    }
    assert exported_config(base).norm_before_residual is True
    assert exported_config({**base, "norm_before_residual": False}).norm_before_residual is False


def test_vllm_spec_metrics_names_and_a_server_without_a_drafter():
    """`vllm/v1/spec_decode/metrics.py` registers `vllm:spec_decode_num_drafts`,
    `..._num_draft_tokens`, `..._num_accepted_tokens` and `..._num_accepted_tokens_per_pos`
    (label `position`), shown by Prometheus with `_total`."""
    text = "\n".join(
        [
            "# TYPE vllm:spec_decode_num_drafts counter",
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="t"} 10.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="t"} 30.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="t"} 17.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 8.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6.0',
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 3.0',
        ]
    )
    m = vllm.parse_spec_metrics(text)
    assert m["present"] and m["num_drafts"] == 10 and m["num_accepted_tokens"] == 17
    assert m["accepted_per_pos"] == [8.0, 6.0, 3.0]
    plain = 'vllm:num_requests_running{model_name="t"} 0.0\nvllm:generation_tokens_total 5.0'
    assert vllm.parse_spec_metrics(plain)["present"] is False


def test_exports_of_a_trained_drafter_serve_the_trained_layers(tmp_path, trained_drafter):
    """After each engine's own rule, the exported ids are the layers the drafter trained on."""
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export

    trained = json.loads((trained_drafter / "drafter_config.json").read_text())["aux_layer_ids"]
    sg = export_drafter(trained_drafter, "sglang", tmp_path / "sglang")
    sg_cfg = json.loads((sg / "config.json").read_text())
    sg_ids = sg_cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert sglang_captures(sg_ids, 4) == trained
    assert sg_ids != trained  # the offset is applied, not skipped
    vl = export_drafter(trained_drafter, "vllm", tmp_path / "vllm")
    assert vllm_captures(json.loads((vl / "config.json").read_text())) == trained
    for folder in (sg, vl):
        assert check_export(folder)["aux_layers_hf"] == trained


def test_validator_catches_an_sglang_export_one_layer_off(tmp_path, trained_drafter):
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import ExportError, check_export

    sg = export_drafter(trained_drafter, "sglang", tmp_path / "sglang")
    cfg = json.loads((sg / "config.json").read_text())
    hf = cfg["eyas"]["trained_hf_layers"]
    cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = hf  # the old, unshifted ids
    (sg / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ExportError) as err:
        check_export(sg)
    assert any("trained on" in p for p in err.value.problems), err.value.problems


# -- issue 26: the six silent losses -----------------------------------------------------------

KIMI_ARCHS = ["KimiK25ForConditionalGeneration"]


def _published_kimi_sglang_config(ids: list[int]) -> dict:
    """An SGLang EAGLE-3 drafter config in the published Kimi-K2.5 layout (no weights)."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 7168,
        "intermediate_size": 12288,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "head_dim": 128,
        "num_hidden_layers": 1,
        "vocab_size": 163840,
        "draft_vocab_size": 163840,
        "target_hidden_size": 7168,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
    }


@pytest.mark.parametrize(
    ("ids", "convention"),
    [([1, 29, 57], "layer outputs"), ([2, 30, 58], "HF index")],
    ids=["specforge_torchspec", "lightseek_mla"],
)
def test_third_party_ids_in_both_sglang_conventions_read_the_intended_layers(ids, convention):
    """SpecForge `configs/deepseek-v3-671b-eagle3.json` and TorchSpec
    `kimi_k25_eagle3_mla.json` write `[1, 29, 57]`; `lightseekorg/kimi-k2.5-eagle3-mla` writes
    `[2, 30, 58]` (SGLang PR #25454). Both mean HF 2/30/58, and the reader says how it chose."""
    config = _published_kimi_sglang_config(ids)
    assert exported_aux_layers(config) == [2, 30, 58]
    read = exported_config(config)
    assert read.aux_layer_ids == [2, 30, 58]
    assert convention in read.extra["aux_layer_rule"]
    # SGLang itself on Kimi-K2.5 (>= 0.5.13): the same layers (run on its code in
    # test_sglang_source.py)
    assert sglang.captured_layers(ids, sglang.capture_rule(KIMI_ARCHS)) == [2, 30, 58]


def test_eyas_sglang_ids_are_right_under_both_rules_or_refused():
    """HF ids whose first is 2 become `[1, ...]`, read alike by SGLang before and after 0.5.13
    on every model; other ids are right on Llama/Qwen models (plus one, every version) and
    refused on DeepSeek/Kimi, where 0.5.13 reads them as the HF index."""
    for hf, archs in (([2, 30, 58], KIMI_ARCHS), ([1, 2, 3], ["LlamaForCausalLM"])):
        written = sglang.to_sglang_layer_ids(hf, archs)
        rule = sglang.capture_rule(archs)
        assert sglang.captured_layers(written, rule) == hf
        assert sglang.captured_layers(written, rule, since_first_id=False) == hf
    for archs in (KIMI_ARCHS, ["DeepseekV3ForCausalLM"]):
        with pytest.raises(EyasError) as err:
            sglang.to_sglang_layer_ids([1, 30, 58], archs)
        assert err.value.reason == "sglang_layer_ids_ambiguous" and "0.5.13" in err.value.detail


def test_export_check_engine_refuses_the_other_engines_layout(tmp_path):
    """vLLM's registry maps `LlamaForCausalLMEagle3` to `Eagle3LlamaForCausalLM` and reads the
    `eagle_config` ids as the HF index (vllm `registry.py`, `eagle3_utils.py`
    `get_eagle3_aux_layers_from_config`): an SGLang export loaded by vLLM is one layer off
    (shown by vLLM's own classes in test_vllm_parity.py). SGLang loads no speculators config."""
    from typer.testing import CliRunner

    from drafter.test_eagle3 import tiny
    from eyas.cli import app
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import ExportError, check_export
    from eyas.train.checkpoint import save_drafter

    save_drafter(tiny(False), tmp_path / "d", {})  # fuses HF 1, 2, 3
    sg = export_drafter(tmp_path / "d", "sglang", tmp_path / "sglang")
    vl = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    assert json.loads((sg / "config.json").read_text())["eyas"]["engine"] == "sglang"
    assert json.loads((vl / "config.json").read_text())["eyas"]["engine"] == "vllm"
    assert check_export(sg, engine="sglang")["layout"] == "sglang"
    assert check_export(vl, engine="vllm")["warnings"] == []
    with pytest.raises(ExportError) as err:
        check_export(sg, engine="vllm")
    assert any("vLLM would capture HF layers [0, 1, 2]" in p for p in err.value.problems)
    with pytest.raises(ExportError) as err:
        check_export(vl, engine="sglang")
    assert any("speculators" in p for p in err.value.problems)
    run = CliRunner().invoke(app, ["export", "check", str(sg), "--engine", "vllm"])
    assert run.exit_code != 0 and "vLLM would capture" in run.output


def test_a_z_lab_dflash_layout_checked_for_vllm_warns(tmp_path):
    from drafter.test_dflash import tiny
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import check_export
    from eyas.train.checkpoint import save_drafter

    save_drafter(tiny(), tmp_path / "d", {})
    zlab = export_drafter(tmp_path / "d", "sglang", tmp_path / "zlab")
    summary = check_export(zlab, engine="vllm")
    assert summary["layout"] == "sglang" and "#40727" in summary["warnings"][0]


def test_eagle3_1_keys_are_written_where_every_vllm_reads_them(tmp_path):
    """`update_eagle3` (vLLM >= 0.25, checked 0.25/0.28/0.30/0.32) copies the top-level
    `fc_norm`/`norm_output` (default False); vLLM 0.22/0.23 has no such line and its model reads
    them from `transformer_layer_config`, copied wholesale into the drafter's config."""
    from drafter.test_eagle3 import tiny
    from eyas.export.drafter import export_drafter
    from eyas.export.validate import ExportError, check_export
    from eyas.train.checkpoint import save_drafter

    save_drafter(tiny(True), tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    cfg = json.loads((out / "config.json").read_text())
    for key in ("fc_norm", "norm_output"):
        assert cfg[key] is True and cfg["transformer_layer_config"][key] is True
    cfg["transformer_layer_config"].pop("norm_output")  # an export vLLM 0.23 reads without it
    (out / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ExportError) as err:
        check_export(out)
    assert any("norm_output" in p and "vLLM <= 0.23" in p for p in err.value.problems)


def test_dflash_speculative_tokens_come_from_the_block(tmp_path):
    """vLLM drafts blocks of `1 + num_speculative_tokens` and never reads `block_size`
    (`v1/spec_decode/dflash.py`); `vllm serve EXPORT` takes the count from
    `proposal_methods[0].speculative_tokens` (`SpeculatorsConfig.build_vllm_speculative_config`)."""
    from drafter.test_dflash import tiny
    from eyas.drafter.registry import get_method
    from eyas.export.drafter import export_drafter
    from eyas.train.checkpoint import save_drafter

    save_drafter(tiny(block=16), tmp_path / "d", {})
    out = export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm", speculative_tokens=3)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_config"]["proposal_methods"][0]["speculative_tokens"] == 15
    spec = get_method("dflash").speculative_configs()["vllm"](out, 15)
    assert spec["num_speculative_tokens"] == 15
    with pytest.raises(EyasError) as err:
        get_method("dflash").speculative_configs()["vllm"](out, 3)
    assert err.value.reason == "bad_flag" and "--k 15" in err.value.detail


def test_fused_layers_are_in_the_engines_layer_order(tmp_path):
    """Both engines append captured states as their layer loop reaches them (vLLM
    `EagleModelMixin._maybe_add_hidden_state`; SGLang `if i in self.layers_to_capture`):
    `--aux-layers 30,2,58` trains, evaluates and exports as 2, 30, 58, and a list in another
    order is refused wherever it could reach `fc`."""
    from drafter.test_eagle3 import tiny
    from eyas.capture.config import CaptureConfig
    from eyas.drafter.method import check_layer_ids
    from eyas.export.drafter import export_drafter
    from eyas.train.checkpoint import save_drafter
    from eyas.train.config import TrainConfig

    cfg = TrainConfig(target=tmp_path, out=tmp_path, data=tmp_path, aux_layers=[30, 2, 58])
    assert cfg.aux_layers == [2, 30, 58]
    capture = CaptureConfig(target=tmp_path, data=tmp_path, out=tmp_path, aux_layers=[3, 1, 2])
    assert capture.aux_layers == [1, 2, 3]
    with pytest.raises(EyasError, match="layer order"):
        check_layer_ids([3, 1, 2], 4, what="EAGLE-3")
    model = tiny(False)
    model.config.aux_layer_ids = [3, 1, 2]  # a drafter trained before the order was enforced
    save_drafter(model, tmp_path / "d", {})
    with pytest.raises(EyasError, match="layer order"):
        export_drafter(tmp_path / "d", "vllm", tmp_path / "vllm")
    unsorted = _published_kimi_sglang_config([1, 57, 29])  # first id 1: outputs, every rule
    assert exported_aux_layers(unsorted) == [2, 30, 58]
