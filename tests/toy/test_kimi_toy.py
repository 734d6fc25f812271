"""The Kimi-K2.5-shaped toy (`eyas toy build --preset kimi`): Kimi-K2.5's checkpoint layout (the
`KimiK25ForConditionalGeneration` wrapper; a DeepSeek-V3 text model with MLA, MoE and YaRN under
`text_config`; `language_model.*` weights, one tensor per routed expert) through every stage on
CPU: render, generate, audit, capture, train (from captures and online), export, validate,
offline evaluation. The real vLLM on CPU: `tests/integration/test_vllm_kimi.py`."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from eyas.cli import app
from eyas.errors import EyasError
from eyas.hf_models import load_frozen_lm, target_model
from eyas.toy.datasets import FAMILIES, write_datasets
from eyas.toy.kimi_k25 import checkpoint_tensors

runner = CliRunner()
PREFIX = "language_model."


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def _text(toy) -> dict:
    return json.loads((toy / "config.json").read_text())["text_config"]


def expected_weight_names(text: dict) -> set[str]:
    """Every tensor of a DeepSeek-V3 / Kimi-K2 text model under Kimi-K2.5's names: what vLLM's
    `deepseek_v2.py` `DeepseekV2ForCausalLM.load_weights` maps (`q_a_proj`/`kv_a_proj_with_mqa`
    into `fused_qkv_a_proj`, dense `gate_proj`/`up_proj` into `gate_up_proj`, routed experts by
    `fused_moe_make_expert_params_mapping(ckpt_gate_proj_name="gate_proj", ...)`, i.e.
    `mlp.experts.{e}.gate_proj.weight`, and `mlp.gate.e_score_correction_bias` for noaux_tc)."""
    m = PREFIX + "model."
    names = {m + "embed_tokens.weight", m + "norm.weight", PREFIX + "lm_head.weight"}
    attn = [
        "q_a_proj",
        "q_a_layernorm",
        "q_b_proj",
        "kv_a_proj_with_mqa",
        "kv_a_layernorm",
        "kv_b_proj",
        "o_proj",
    ]
    proj = ("gate_proj", "up_proj", "down_proj")
    for i in range(text["num_hidden_layers"]):
        layer = f"{m}layers.{i}."
        names |= {f"{layer}self_attn.{a}.weight" for a in attn}
        names |= {layer + "input_layernorm.weight", layer + "post_attention_layernorm.weight"}
        if i < text["first_k_dense_replace"]:
            names |= {f"{layer}mlp.{p}.weight" for p in proj}
            continue
        names |= {layer + "mlp.gate.weight", layer + "mlp.gate.e_score_correction_bias"}
        names |= {f"{layer}mlp.shared_experts.{p}.weight" for p in proj}
        names |= {
            f"{layer}mlp.experts.{e}.{p}.weight"
            for e in range(text["n_routed_experts"])
            for p in proj
        }
    return names


def test_the_latent_is_widened_exactly(tmp_path, kimi_dir):
    """The build trains with a latent as wide as the hidden size and writes the model with
    Kimi's 512 (`kimi_k25.widen_latent`): the same function, its latent spread over all 512."""
    from transformers import AutoTokenizer

    from eyas.toy.kimi_k25 import check_same_function, new_text_model, widen_latent, write_config
    from eyas.toy.train import PRESETS

    write_config(tmp_path, PRESETS["kimi"], AutoTokenizer.from_pretrained(kimi_dir))
    narrow = new_text_model(tmp_path, seed=3).eval()
    with torch.no_grad():  # a trained latent norm is not all ones
        for layer in narrow.model.layers:
            layer.self_attn.kv_a_layernorm.weight.uniform_(0.5, 1.5)
    wide = widen_latent(narrow, tmp_path, seed=3)
    assert narrow.config.kv_lora_rank == narrow.config.hidden_size == 96
    assert wide.config.kv_lora_rank == 512
    ids = torch.randint(0, narrow.config.vocab_size, (2, 40))
    with torch.no_grad():
        torch.testing.assert_close(wide(input_ids=ids).logits, narrow(input_ids=ids).logits)
        latent = wide.model.layers[2].self_attn.kv_a_proj_with_mqa(torch.randn(5, 96))[:, :512]
    assert (latent.abs() > 1e-6).float().mean() > 0.99  # no dead coordinates
    examples = [(ids[0].tolist(), 10), (ids[1, :25].tolist(), 5)]
    check_same_function(narrow, wide, examples, pad_id=0)  # what the build checks before saving
    with torch.no_grad():
        wide.model.layers[1].self_attn.kv_b_proj.weight.mul_(1.1)
    with pytest.raises(EyasError, match="widened latent changed"):
        check_same_function(narrow, wide, examples, pad_id=0)


def test_the_config_is_kimi_k25s_layout_and_the_accessor_reads_text_config(kimi_toy):
    from transformers import AutoTokenizer

    from eyas.toy.build import failed_gates, load_toy_info

    cfg = json.loads((kimi_toy / "config.json").read_text())
    text = cfg["text_config"]
    assert cfg["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert cfg["model_type"] == "kimi_k25" and "vision_config" in cfg
    assert text["model_type"] == "kimi_k2" and text["architectures"] == ["DeepseekV3ForCausalLM"]
    assert text["q_lora_rank"] > 0 and (text["kv_lora_rank"], text["qk_rope_head_dim"]) == (512, 64)
    assert text["qk_nope_head_dim"] > 0 and text["v_head_dim"] > 0
    assert text["n_routed_experts"] > text["num_experts_per_tok"] >= 2
    assert text["n_shared_experts"] == 1 and text["first_k_dense_replace"] == 1
    assert text["rope_scaling"]["type"] == "yarn"
    assert "num_hidden_layers" not in cfg and "hidden_size" not in cfg  # only under text_config

    t = target_model(kimi_toy)
    tokenizer = AutoTokenizer.from_pretrained(kimi_toy)
    assert t.wrapper and t.text_model_type == "kimi_k2"
    assert (t.num_layers, t.hidden_size, t.vocab_size) == (4, 96, len(tokenizer))
    assert t.num_key_value_heads == t.num_attention_heads == text["num_attention_heads"]
    assert t.intermediate_size == text["intermediate_size"]
    assert t.rope_scaling["rope_type"] == "yarn"
    scaling = text["rope_scaling"]
    assert t.context_length == scaling["original_max_position_embeddings"] * scaling["factor"]
    assert t.tensor_names("embed")[0] == "language_model.model.embed_tokens.weight"
    assert t.tensor_names("norm")[0] == "language_model.model.norm.weight"
    assert t.tensor_names("head") == ("language_model.lm_head.weight",)

    info = load_toy_info(kimi_toy)
    assert info["preset"] == "kimi" and info["build_version"] >= 1
    assert failed_gates(info["quality"]) == []  # trained like the other toys, to its gates


def test_the_checkpoint_has_the_per_expert_names_the_engines_load(kimi_toy):
    index = json.loads((kimi_toy / "model.safetensors.index.json").read_text())["weight_map"]
    assert set(index) == expected_weight_names(_text(kimi_toy))
    assert not any("gate_up_proj" in n for n in index)  # transformers' fused names never saved
    assert len(set(index.values())) == 2  # sharded, as the real checkpoint is
    for file in set(index.values()):
        with safe_open(str(kimi_toy / file), "pt") as f:
            assert set(f.keys()) == {n for n, v in index.items() if v == file}
    assert index[PREFIX + "model.embed_tokens.weight"] != index[PREFIX + "lm_head.weight"]


def test_the_text_model_is_loaded_from_exactly_those_tensors(kimi_toy):
    from transformers import DeepseekV3ForCausalLM

    model = load_frozen_lm(kimi_toy, "cpu", torch.float32)
    assert isinstance(model, DeepseekV3ForCausalLM)  # the text model alone, no vision tower
    text = _text(kimi_toy)
    attn = model.model.layers[1].self_attn
    assert attn.kv_lora_rank == 512 and attn.q_lora_rank == text["q_lora_rank"]
    assert hasattr(model.model.layers[0].mlp, "gate_proj")  # the dense first layer
    assert model.model.layers[1].mlp.experts.num_experts == text["n_routed_experts"]

    # Rebuild every parameter from the files by hand: the loaded model holds exactly those.
    files = {}
    for file in sorted({p.name for p in kimi_toy.glob("model-*.safetensors")}):
        files.update(load_file(kimi_toy / file))
    state = model.state_dict()
    for i in range(text["first_k_dense_replace"], text["num_hidden_layers"]):
        base = f"{PREFIX}model.layers.{i}.mlp.experts."
        stack = lambda p, base=base: torch.stack(  # noqa: E731
            [files[f"{base}{e}.{p}.weight"] for e in range(text["n_routed_experts"])]
        )
        fused = torch.cat([stack("gate_proj"), stack("up_proj")], 1)
        assert torch.equal(state[f"model.layers.{i}.mlp.experts.gate_up_proj"], fused)
        assert torch.equal(state[f"model.layers.{i}.mlp.experts.down_proj"], stack("down_proj"))
    for name, tensor in state.items():
        if ".mlp.experts." not in name:
            assert torch.equal(tensor, files[PREFIX + name]), name
    # ... and the writer's split of transformers' fused experts gives the files back
    written = checkpoint_tensors(model)
    assert written.keys() == files.keys()
    assert all(torch.equal(written[n], files[n]) for n in files)

    found, read = target_model(kimi_toy).load_tensors("embed", "norm", "head")
    assert read == [
        "language_model.model.embed_tokens.weight",
        "language_model.model.norm.weight",
        "language_model.lm_head.weight",
    ]
    assert torch.equal(found["embed"], model.get_input_embeddings().weight)
    assert torch.equal(found["norm"], model.model.norm.weight)
    assert torch.equal(found["head"], model.get_output_embeddings().weight)


def _without(toy, dest, name: str):
    """A copy of the toy whose checkpoint lacks one tensor."""
    shutil.copytree(toy, dest)
    index_path = dest / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    file = dest / index["weight_map"].pop(name)
    tensors = load_file(file)
    del tensors[name]
    save_file(tensors, str(file), metadata={"format": "pt"})
    index_path.write_text(json.dumps(index))
    return dest


@pytest.mark.parametrize(
    "gone",
    [
        f"{PREFIX}model.layers.2.self_attn.kv_b_proj.weight",
        f"{PREFIX}model.layers.3.mlp.experts.5.up_proj.weight",  # one of a fused group
    ],
)
def test_a_missing_text_weight_is_an_error_not_a_random_init(tmp_path, kimi_toy, gone):
    copy = _without(kimi_toy, tmp_path / "kimi", gone)
    with pytest.raises(EyasError) as err:
        load_frozen_lm(copy, "cpu", torch.float32)
    assert err.value.reason == "bad_target"
    assert gone.removeprefix(PREFIX) in err.value.detail


# -- the pipeline (slow: seconds per stage) -----------------------------------------------------


@pytest.fixture(scope="module")
def run(module_tmp, kimi_toy):
    """prepare (convert + render) and generate (in process) the eight toy datasets on the
    Kimi-shaped toy, through the CLI; audited."""
    root = module_tmp("kimi-run")
    sources = write_datasets(root / "sources", 6, seed=11)
    lines = [f'[run]\nname = "k"\ndir = "{root}"\n', f'[model]\ndir = "{kimi_toy}"\n']
    for fam in FAMILIES:
        lines.append(
            f'[[datasets]]\nname = "{fam.name}"\npath = "{sources[fam.name]}"\n'
            f'format = "{fam.format}"\n'
        )
    config = root / "pipeline.toml"
    config.write_text("\n".join(lines))
    prepared = cli("prepare", "--config", config)
    assert prepared.exit_code == 0, prepared.output
    generated = cli(
        "generate",
        "--config",
        config,
        "--backend",
        "local",
        "--max-new-tokens",
        96,
        "--no-progress",
    )
    assert generated.exit_code == 0, generated.output
    audited = cli("audit", root / "k" / "generate", "--model", kimi_toy, "--json", root / "a.json")
    return {
        "root": root,
        "prepare": root / "k" / "prepare",
        "generate": root / "k" / "generate",
        "audit": audited,
    }


@pytest.mark.slow
def test_render_generate_and_audit(run, kimi_toy):
    from eyas.render import Renderer
    from eyas.store import load_table, read_rendered

    rendered = [row for _, row in read_rendered(run["prepare"])]
    with_tools = [r for r in rendered if r["tools"]]
    assert with_tools and all(
        r["prompt_text"].startswith("<|im_system|>tool_declare<|im_middle|>") for r in with_tools
    )
    table = load_table(run["generate"])
    samples = [table.sample(i) for i in range(len(table))]
    assert len(samples) == len(rendered) > 0
    by_id = {r["id"]: r["prompt_ids"] for r in rendered}
    assert all(s.prompt_ids == by_id[s.id] for s in samples)  # the ids rendered are the ids sent
    stops = set(Renderer(kimi_toy).stop_token_ids())
    stopped = [s for s in samples if s.finish_reason == "stop"]
    assert len(stopped) >= 0.9 * len(samples)  # the toy passed its stop-rate gate
    assert all(s.output_ids[-1] in stops and s.matched_stop in stops for s in stopped)
    # every check ran on the wrapper's tokenizer and template; the verdict is the toy's own
    report = json.loads((run["root"] / "a.json").read_text())
    assert report["skipped_checks"] == {} and report["profile"] == "kimi-k2.5"
    assert report["num_samples"] == len(samples)
    assert run["audit"].exit_code == {"PASS": 0, "FAIL": 1}[report["verdict"]]
    quarantined = [json.loads(x) for x in Path(report["quarantine_file"]).read_text().splitlines()]
    assert {q["id"] for q in quarantined} <= {s.id for s in samples}
    assert len({q["id"] for q in quarantined}) == report["quarantined"]


@pytest.fixture(scope="module")
def captured(run, kimi_toy):
    out = run["root"] / "capture"
    result = cli(
        "capture", "--target", kimi_toy, "--data", run["generate"], "--out", out,
        "--dtype", "float32",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_local_capture_equals_transformers_hidden_states(captured, kimi_toy):
    from eyas.store.captures import StateReader, read_capture_index

    rows, manifest = read_capture_index(captured)
    assert manifest["layers"] == [1, 2, 3, 4]  # aux ids + the last layer, from text_config
    assert manifest["target"]["model_type"] == "kimi_k25" and manifest["target"]["wrapper"]
    model = load_frozen_lm(kimi_toy, "cpu", torch.float32)
    reader = StateReader()
    for row in rows[:6]:
        got = reader.read(row).float()  # [T, 4, H]
        with torch.no_grad():
            out = model(input_ids=torch.tensor([row.input_ids]), output_hidden_states=True)
        assert got.shape == (len(row.input_ids), 4, 96)
        for j, layer in enumerate([1, 2, 3]):  # the same computation: equal to float rounding
            torch.testing.assert_close(got[:, j], out.hidden_states[layer][0])
        # the last layer is stored before the final norm: norm and head give the logits back
        normed = model.model.norm(got[:, 3])
        torch.testing.assert_close(normed, out.hidden_states[4][0])
        torch.testing.assert_close(model.lm_head(normed), out.logits[0])


@pytest.mark.slow
def test_online_training_runs_the_wrapper_target_in_process(run, kimi_toy, tmp_path):
    out = tmp_path / "d"
    result = cli(
        "train", "--target", kimi_toy, "--data", run["generate"], "--out", out,
        "--steps", 2, "--ttt", 2, "--draft-vocab", 300, "--batch-tokens", 2000,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cfg = json.loads((out / "drafter" / "drafter_config.json").read_text())
    assert cfg["data"]["source"] == "online"
    assert cfg["data"]["target_tensors_loaded"] == "the whole model"
    assert cfg["aux_layer_ids"] == [1, 2, 3] and cfg["target_hidden_size"] == 96


@pytest.fixture(scope="module")
def drafter(captured, kimi_toy):
    """Trained from the captures: only three tensors of the target are read. The Llama-layer
    drafter (`--attention mha`; MLA, the default on this target, has its own tests in
    tests/drafter/test_mla.py), whose vLLM export is the speculators layout."""
    out = captured.parent / "drafter"
    result = cli(
        "train", "--target", kimi_toy, "--hidden-states", captured, "--out", out,
        "--steps", 30, "--ttt", 3, "--draft-vocab", 400, "--batch-tokens", 3000, "--lr", 3e-3,
        "--attention", "mha",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_training_from_captures_loads_only_the_language_model_tensors(drafter):
    cfg = json.loads((drafter / "drafter" / "drafter_config.json").read_text())
    assert cfg["data"]["source"] == "captured"
    assert cfg["data"]["target_tensors_loaded"] == [
        "language_model.model.embed_tokens.weight",
        "language_model.model.norm.weight",
        "language_model.lm_head.weight",
    ]
    assert cfg["aux_layer_ids"] == [1, 2, 3] and cfg["target_hidden_size"] == 96
    assert cfg["vocab_size"] == target_model(cfg["target_dir"]).vocab_size


@pytest.mark.slow
def test_the_exports_validate_against_the_wrapper(drafter, kimi_toy, tmp_path):
    out = tmp_path / "vllm"
    exported = cli("export", "drafter", "--checkpoint", drafter, "--format", "vllm", "--out", out)
    assert exported.exit_code == 0, exported.output
    checked = cli("export", "check", out, "--target", kimi_toy, "--engine", "vllm")
    assert checked.exit_code == 0, checked.output
    config = json.loads((out / "config.json").read_text())
    assert config["target_hidden_size"] == 96
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    verifier = config["speculators_config"]["verifier"]
    assert verifier["architectures"] == ["KimiK25ForConditionalGeneration"]
    # SGLang's DeepSeek-V3 model (which serves Kimi) reads [0, 1, 2] as layer outputs up to
    # 0.5.12 and as the HF index from 0.5.13 (PR #25454): no ids are right on both
    sglang = cli(
        "export", "drafter", "--checkpoint", drafter, "--format", "sglang", "--out", tmp_path / "s"
    )
    assert sglang.exit_code == 1 and "sglang_layer_ids_ambiguous" in sglang.output
    # named, the version decides: layer outputs for 0.5.12; 0.5.23 cannot capture HF layer 1
    sglang = cli(
        "export", "drafter", "--checkpoint", drafter, "--format", "sglang", "--out",
        tmp_path / "s", "--engine-version", "0.5.12.post1",
    )  # fmt: skip
    assert sglang.exit_code == 0, sglang.output
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
    assert config["eyas"]["sglang_ids_for_version"] == "< 0.5.13"
    sglang = cli(
        "export", "drafter", "--checkpoint", drafter, "--format", "sglang", "--out",
        tmp_path / "s2", "--engine-version", "0.5.23",
    )  # fmt: skip
    assert sglang.exit_code == 1 and "sglang_layer_ids_unservable" in sglang.output


@pytest.mark.slow
def test_offline_evaluation_is_lossless(drafter, run, kimi_toy, tmp_path):
    out = tmp_path / "eval.json"
    result = cli(
        "eval", "--target", kimi_toy, "--drafter", drafter, "--input", run["prepare"],
        "--limit", 1, "--max-new-tokens", 32, "--k", 3, "--json", out,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["lossless"] is True and report["lossless_mismatches"] == []
    assert report["acceptance_length"] > 1.0  # the trained drafter is accepted, sometimes
    assert report["settings"]["prompts"] == len(FAMILIES)
