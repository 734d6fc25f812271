"""Under bf16 one process holds the drafter's frozen tensors (the target's) in bf16, as FSDP2
ranks do (`eyas.train.precision`); the printed estimate counts them as held; the final drafter
still carries the target's embedding as the target stores it; a captured target keeps its
embedding in host memory and holds only its head and final norm on the device."""

import torch
from safetensors.torch import load_file

from eyas.hf_models import target_model
from eyas.train import budget as budget_module
from eyas.train.loop import Trainer
from eyas.train.precision import hold_frozen
from eyas.train.target import CapturedTarget
from train_helpers import toy_train_config


def test_one_bf16_process_holds_the_frozen_tensors_in_bf16(
    tmp_path, toy_tiny, toy_samples, monkeypatch
):
    seen = {}
    estimate = budget_module.estimate
    monkeypatch.setattr(budget_module, "estimate", lambda **kw: seen.update(kw) or estimate(**kw))
    cfg = toy_train_config(
        toy_tiny, tmp_path / "o", data=toy_samples, steps=3, precision="bf16",
        eagle3={"draft_head": "frozen"},
    )  # fmt: skip
    trainer = Trainer(cfg, lambda s: None)
    failed = True
    try:
        trainer.setup()
        model = trainer.raw_model
        frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
        assert set(frozen) == {"embed_tokens.weight", "lm_head.weight"}
        assert all(p.dtype == torch.bfloat16 for p in frozen.values())
        assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
        # the estimate counts the frozen tensors as held, and the target's head beside them
        held = sum(p.numel() * 2 for p in frozen.values()) + trainer.target.device_bytes()
        assert seen["frozen_bytes"] == held
        history = trainer.train(None)
        out = trainer.finish()
        failed = False
    finally:
        trainer.cleanup(failed)
    assert all(torch.isfinite(torch.tensor(m.loss)) for m in history)
    # the final drafter's embedding is the target's as stored, not the bf16 copy trained with
    saved = load_file(str(out / "model.safetensors"))
    stored = target_model(toy_tiny).load_tensors("embed")[0]["embed"]
    assert saved["embed_tokens.weight"].dtype == torch.float32
    assert torch.equal(saved["embed_tokens.weight"], stored.float())
    if stored.dtype == torch.float32:  # the toy stores fp32: the bf16 copy is another tensor
        assert not torch.equal(stored, stored.bfloat16().float())


def test_hold_frozen_casts_only_the_frozen_parameters_and_says_what_it_freed():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    model[0].weight.requires_grad_(False)
    assert hold_frozen(model, torch.bfloat16) == 10 * 4 * 2
    assert model[0].weight.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32
    assert hold_frozen(model, torch.bfloat16) == 0  # already held so


def test_a_captured_target_keeps_its_embedding_off_the_device(toy_tiny):
    """On the `meta` device as a stand-in for a GPU: the head and norm go there, the embedding
    (read by the drafter's init and by `finish` only) stays in host memory."""
    target = CapturedTarget(toy_tiny, {"aux_layers": [1, 2, 3]}, device="meta")
    assert target.head().device.type == "meta"
    assert target.embedding().device.type == "cpu"
    norm = target._norm
    head = target.head()
    assert target.device_bytes() == head.numel() * head.element_size() + (
        norm.numel() * norm.element_size()
    )
