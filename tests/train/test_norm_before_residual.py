"""`--eagle3.norm-before-residual`: the residual stream starts from hidden_norm(fused) instead
of the fused state, as speculators' `Eagle3DraftModel` builds it by default (its training
schema: `norm_before_residual` default True). Trained, written into the vLLM export (which
vLLM's `llama_eagle3.py` reads), read back as the same function, and refused for SGLang, whose
`llama_eagle3.py` has no such layer."""

import json

import pytest
import torch

from eyas.drafter.load import load_drafter
from eyas.errors import EyasError
from eyas.export.drafter import export_drafter
from eyas.train.loop import run_train
from train_helpers import toy_train_config


def test_trained_exported_for_vllm_and_read_back_as_the_same_function(
    tmp_path, toy_tiny, toy_samples
):
    result = run_train(
        toy_train_config(
            toy_tiny, tmp_path / "o", data=toy_samples, steps=3,
            eagle3={"norm_before_residual": True},
        ),
        log=lambda s: None,
    )  # fmt: skip
    assert result.history[-1].loss < result.history[0].loss
    config = json.loads((result.drafter / "drafter_config.json").read_text())
    assert config["norm_before_residual"] is True
    drafter = load_drafter(result.drafter, target_dir=toy_tiny)
    assert drafter.config.norm_before_residual is True

    out = export_drafter(result.drafter, "vllm", tmp_path / "vllm")
    assert json.loads((out / "config.json").read_text())["norm_before_residual"] is True
    back = load_drafter(out, target_dir=toy_tiny)
    assert back.config.norm_before_residual is True

    torch.manual_seed(0)
    ids = torch.randint(0, drafter.config.vocab_size, (1, 12))
    aux = torch.randn(1, 12, 3 * drafter.config.target_hidden_size)
    with torch.no_grad():
        for param in drafter.parameters():  # the export holds bf16 weights: compare like for like
            param.copy_(param.bfloat16().float())
        ours = [drafter.logits(n) for n in drafter(ids, aux, 3)]
        theirs = [back.logits(n) for n in back(ids, aux, 3)]
        # the same weights with the residual taken before the norm: another function
        drafter.midlayer.norm_before_residual = False
        plain = [drafter.logits(n) for n in drafter(ids, aux, 3)]
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)
    assert not torch.allclose(ours[0], plain[0])

    with pytest.raises(EyasError, match=r"export_unsupported.*norm_before_residual"):
        export_drafter(result.drafter, "sglang", tmp_path / "sglang")
