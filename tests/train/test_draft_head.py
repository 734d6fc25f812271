"""`--eagle3.draft-head trained|frozen`: the EAGLE-3 draft head starts from the target's rows of the
draft ids either way (speculators' `load_verifier_weights` does the same); frozen, it stays
there through training, checkpoints, resume and export."""

import pytest
import torch
from safetensors.torch import load_file

from eyas.drafter.load import load_drafter
from eyas.hf_models import target_model
from eyas.train.config import TrainConfig
from eyas.train.loop import Trainer, run_train
from train_helpers import toy_train_config


def _target_rows(toy_tiny, model) -> torch.Tensor:
    found, _ = target_model(toy_tiny).load_tensors("head")
    return found["head"].float()[model.draft_to_target()]


@pytest.mark.parametrize("mode", ["trained", "frozen"])
def test_the_head_starts_from_the_targets_rows(tmp_path, toy_tiny, toy_samples, mode):
    trainer = Trainer(
        # a reduced draft vocabulary (the default is the toy's whole one): the rows are then a
        # selection of the target's, which is what this test checks
        toy_train_config(
            toy_tiny, tmp_path / "o", data=toy_samples, eagle3={"draft_head": mode}, draft_vocab=400
        ),
        log=lambda s: None,
    )
    trainer.setup()
    model = trainer.raw_model
    assert model.config.draft_head == mode
    # a draft vocabulary smaller than the target's: the rows are a selection, not a copy
    assert model.config.draft_vocab_size < model.config.vocab_size
    assert torch.equal(model.lm_head.weight.detach(), _target_rows(toy_tiny, model))
    assert model.lm_head.weight.requires_grad == (mode == "trained")
    trained = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert (id(model.lm_head.weight) in trained) == (mode == "trained")
    trainer.cleanup()


def test_a_frozen_head_stays_the_targets_rows_through_training_and_export(
    tmp_path, toy_tiny, toy_samples
):
    out = tmp_path / "o"
    result = run_train(
        toy_train_config(
            toy_tiny,
            out,
            data=toy_samples,
            eagle3={"draft_head": "frozen"},
            steps=3,
            draft_vocab=400,
        ),
        log=lambda s: None,
    )
    assert result.history[-1].loss < result.history[0].loss  # the rest of it learns
    weights = load_file(str(result.drafter / "model.safetensors"))
    drafter = load_drafter(result.drafter, target_dir=toy_tiny)
    rows = _target_rows(toy_tiny, drafter)
    assert torch.equal(weights["lm_head.weight"].float(), rows)
    # a sharded checkpoint leaves the frozen head out; loading it takes the rows back
    ckpt = next((out / "checkpoints").glob("step-*"))
    loaded = load_drafter(ckpt, target_dir=toy_tiny)
    assert torch.equal(loaded.lm_head.weight.float(), rows)


def test_the_flag_is_checked():
    with pytest.raises(ValueError, match="draft_head"):
        TrainConfig(target="t", data="d", out="o", eagle3={"draft_head": "half"})
