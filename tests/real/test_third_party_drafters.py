"""`eyas eval --drafter` on third-party SGLang drafters in both published conventions, on the
real 30-layer SmolLM2-135M-Instruct: SpecForge/TorchSpec write layer outputs (`[1, 14, 26]`,
as `[1, 29, 57]` for Kimi-K2.5), `lightseekorg/kimi-k2.5-eagle3-mla` the HF index (`[2, 15,
27]`, as `[2, 30, 58]`; SGLang PR #25454). The same weights under either config must fuse HF
layers 2, 15, 27, and evaluate exactly as the drafter in eyas's own layout does."""

import json

import pytest
import torch
from real_helpers import invoke
from safetensors.torch import save_file

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.hf_models import target_model
from eyas.train.checkpoint import save_drafter

pytestmark = [pytest.mark.real, pytest.mark.slow]

HF_LAYERS = [2, 15, 27]


@pytest.fixture(scope="module")
def drafter(smollm2):
    """A drafter over SmolLM2's embedding (random layers: what is compared is which target
    layers feed it, not how well it drafts)."""
    target = target_model(smollm2)
    cfg = Eagle3Config(
        hidden_size=target.hidden_size,
        intermediate_size=256,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=target.vocab_size,
        draft_vocab_size=target.vocab_size,
        target_hidden_size=target.hidden_size,
        aux_layer_ids=HF_LAYERS,
        rope_theta=target.rope_theta,
    )
    torch.manual_seed(0)
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        model.embed_tokens.weight.copy_(target.load_tensors("embed")[0]["embed"])
        model.t2d.fill_(True)
    return model


def _sglang_layout(model, folder, ids):
    folder.mkdir(parents=True)
    c = model.config
    weights = {k: v for k, v in model.state_dict().items() if k not in ("d2t", "t2d")}
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads,
        "num_hidden_layers": 1,
        "vocab_size": c.vocab_size,
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": c.target_hidden_size,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": ids},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _eval(smollm2, drafter_dir, chat_prep, out):
    res = invoke(
        "eval", "--target", smollm2, "--drafter", drafter_dir, "--input", chat_prep,
        "--limit", 1, "--max-new-tokens", 12, "--k", 3, "--json", out,
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output


def test_both_sglang_conventions_fuse_the_intended_layers(smollm2, drafter, chat_prep, tmp_path):
    save_drafter(drafter, tmp_path / "eyas", {"target_dir": str(smollm2)})
    own, _ = _eval(smollm2, tmp_path / "eyas", chat_prep, tmp_path / "own.json")
    assert own["aux_layers_hf"] == HF_LAYERS
    for name, ids, says in (
        ("specforge", [1, 14, 26], "layer outputs"),
        ("lightseek", [2, 15, 27], "HF index"),
    ):
        folder = _sglang_layout(drafter, tmp_path / name, ids)
        got, output = _eval(smollm2, folder, chat_prep, tmp_path / f"{name}.json")
        assert got["aux_layers_hf"] == HF_LAYERS and says in got["aux_layer_rule"], name
        assert f"{HF_LAYERS}" in output  # said on the console too
        # the same drafts: the same layers feed the same weights
        assert got["histogram"] == own["histogram"]
        assert got["acceptance_length"] == own["acceptance_length"]
