"""Offline evaluation with a real (partly accepted) drafter: the chain and tree decoders are
lossless and agree where they must; third-party drafter layouts load and evaluate the same."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from eyas.cli import app
from eyas.drafter.load import load_drafter
from eyas.drafter.registry import method_of
from eyas.evaluate.speculative import greedy_reference, speculative_decode
from eyas.evaluate.tree import tree_decode
from eyas.hf_models import load_frozen_lm
from eyas.render import Renderer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setting(toy_tiny, toy_samples, trained_drafter):
    target = load_frozen_lm(toy_tiny, "cpu", torch.float32)
    drafter = load_drafter(trained_drafter)
    stop = set(Renderer(toy_tiny).stop_token_ids())
    prompts = [json.loads(line)["prompt_ids"] for line in toy_samples.read_text().splitlines()]
    return target, drafter, stop, prompts[::3]


def chain(target, drafter, p, k, n, stop):
    proposer = method_of(drafter).proposer(drafter)
    return speculative_decode(target, proposer, p, k=k, max_new_tokens=n, stop_ids=stop)


def tree(target, drafter, p, depth, topk, nodes, n, stop):
    proposer = method_of(drafter).tree_proposer(drafter)
    return tree_decode(
        target,
        proposer,
        p,
        depth=depth,
        topk=topk,
        num_draft_tokens=nodes,
        max_new_tokens=n,
        stop_ids=stop,
    )


def test_a_partly_accepted_drafter_is_lossless_with_real_cache_cropping(setting):
    target, drafter, stop, prompts = setting
    hist = [0] * 4
    for p in prompts:
        res = chain(target, drafter, p, 3, 48, stop)
        assert res.tokens == greedy_reference(target, p, 48, stop)
        for a in res.accepted:
            hist[a] += 1
    # rejections mid-chain (caches cropped back) and full acceptances both happened
    assert hist[1] + hist[2] > 0 and hist[0] > 0 and hist[3] > 0, hist


def test_a_tree_of_one_branch_is_the_chain(setting):
    target, drafter, stop, prompts = setting
    for p in prompts:
        one = chain(target, drafter, p, 3, 48, stop)
        branch = tree(target, drafter, p, 3, 1, 3, 48, stop)
        assert branch.tokens == one.tokens and branch.accepted == one.accepted


@pytest.mark.parametrize(("topk", "nodes"), [(2, 4), (4, 8)])
def test_tree_drafts_are_lossless(setting, topk, nodes):
    target, drafter, stop, prompts = setting
    accepted = []
    for p in prompts:
        res = tree(target, drafter, p, 3, topk, nodes, 48, stop)
        assert res.tokens == greedy_reference(target, p, 48, stop)
        assert all(a <= 3 for a in res.accepted)
        accepted += res.accepted
    assert max(accepted) >= 1


def _tensors(trained_drafter):
    weights = load_file(str(trained_drafter / "model.safetensors"))
    config = json.loads((trained_drafter / "drafter_config.json").read_text())
    return weights, config


def _layer_config(c):
    return {
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "vocab_size": c["vocab_size"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_theta": c["rope_theta"],
    }


def sglang_layout(trained_drafter, out):
    """What SpecForge/SGLang publish: `midlayer.*` names, an `eagle_config`, and no embedding
    (SGLang takes the target's)."""
    weights, c = _tensors(trained_drafter)
    weights.pop("embed_tokens.weight")
    out.mkdir()
    save_file(
        {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in weights.items()},
        str(out / "model.safetensors"),
    )
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        **_layer_config(c),
        "draft_vocab_size": c["draft_vocab_size"],
        "target_hidden_size": c["target_hidden_size"],
        # SGLang names a layer's output: id k is HF hidden_states[k + 1]
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [i - 1 for i in c["aux_layer_ids"]]},
    }
    (out / "config.json").write_text(json.dumps(config))
    return out


def speculators_layout(trained_drafter, out):
    """What vllm-project/speculators saves: `layers.0.*` names and an Eagle3Speculator config
    with a nested `transformer_layer_config`."""
    weights, c = _tensors(trained_drafter)
    renamed = {k.replace("midlayer.", "layers.0."): v for k, v in weights.items()}
    out.mkdir()
    save_file(renamed, str(out / "model.safetensors"))
    config = {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "transformer_layer_config": _layer_config(c),
        "draft_vocab_size": c["draft_vocab_size"],
        "norm_before_residual": False,
        "target_hidden_size": c["target_hidden_size"],
        "eagle_aux_hidden_state_layer_ids": c["aux_layer_ids"],
    }
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_third_party_layouts_load_and_evaluate_alike(
    tmp_path, toy_tiny, toy_samples, trained_drafter
):
    ours = load_drafter(trained_drafter)
    ids = torch.randint(0, 900, (1, 12))
    aux = torch.randn(1, 12, 3 * ours.config.target_hidden_size)
    layouts = {
        "sglang": sglang_layout(trained_drafter, tmp_path / "sglang"),
        "speculators": speculators_layout(trained_drafter, tmp_path / "speculators"),
    }
    with torch.no_grad():
        want = [ours.logits(h) for h in ours(ids, aux, 2)]
        for name, folder in layouts.items():
            theirs = load_drafter(folder, target_dir=toy_tiny)
            assert theirs.config.aux_layer_ids == ours.config.aux_layer_ids, name
            got = [theirs.logits(h) for h in theirs(ids, aux, 2)]
            tol = 0.1 if name == "sglang" else 1e-6  # bf16 weights in the SGLang layout
            assert all(torch.allclose(g, w, atol=tol) for g, w in zip(got, want)), name
    results = {}
    for name, folder in {"eyas": trained_drafter.parent, **layouts}.items():
        res = CliRunner().invoke(
            app,
            [
                "eval",
                "--target",
                str(toy_tiny),
                "--drafter",
                str(folder),
                "--input",
                str(toy_samples),
                "--k",
                "3",
                "--max-new-tokens",
                "32",
                "--limit",
                "2",
                "--json",
                str(tmp_path / f"{name}.json"),
            ],
        )
        assert res.exit_code == 0, res.output
        results[name] = json.loads((tmp_path / f"{name}.json").read_text())
        assert results[name]["lossless"] is True
    assert results["speculators"]["acceptance_length"] == results["eyas"]["acceptance_length"]
    assert abs(results["sglang"]["acceptance_length"] - results["eyas"]["acceptance_length"]) < 0.3
