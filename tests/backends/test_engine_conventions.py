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
