"""eyas's greedy loop (finished rows leave the batch) gives, prompt for prompt, the ids that
transformers' own `generate` gives for the same left-padded batch and for each prompt alone;
models whose generation config changes greedy decoding go through `generate` itself."""

import pytest
import torch

from eyas.backends.local import hf_generate
from eyas.backends.local.hf_generate import generate_batch
from eyas.hf_models import load_frozen_lm
from eyas.render import Renderer

pytestmark = pytest.mark.slow


def _prompts(renderer: Renderer) -> list[list[int]]:
    questions = ["What is 2 + 2?", "Name a colour.", "Write a long story about a cat and a dog."]
    return [
        renderer.tokenizer.apply_chat_template(
            [{"role": "user", "content": q * (i + 1)}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        for i, q in enumerate(questions)
    ]


def test_greedy_ids_equal_transformers_batched_and_alone(toy_tiny):
    model = load_frozen_lm(toy_tiny, "cpu", torch.float32)
    renderer = Renderer(toy_tiny)
    stop, pad = renderer.stop_token_ids(), renderer.tokenizer.pad_token_id or 0
    prompts = _prompts(renderer)
    got = generate_batch(model, prompts, stop, 40, pad)
    batched = hf_generate._transformers_generate(model, prompts, stop, 40, pad, 0.0, 1.0, None)
    assert [g.output_ids for g in got] == [b.output_ids for b in batched]
    assert [(g.finish_reason, g.matched_stop) for g in got] == [
        (b.finish_reason, b.matched_stop) for b in batched
    ]
    for p, g in zip(prompts, got):
        alone = hf_generate._transformers_generate(model, [p], stop, 40, pad, 0.0, 1.0, None)
        assert g.output_ids == alone[0].output_ids
    lengths = {len(g.output_ids) for g in got}
    assert len(lengths) > 1  # rows did finish at different steps: the shrinking was exercised


def test_a_generation_config_processor_goes_through_generate(toy_tiny, monkeypatch):
    model = load_frozen_lm(toy_tiny, "cpu", torch.float32)
    assert hf_generate._plain_greedy(model)
    model.generation_config.repetition_penalty = 1.3
    assert not hf_generate._plain_greedy(model)
    called = []
    monkeypatch.setattr(
        hf_generate, "_greedy_shrinking", lambda *a: called.append(1) or pytest.fail("fast path")
    )
    renderer = Renderer(toy_tiny)
    out = generate_batch(model, _prompts(renderer)[:1], renderer.stop_token_ids(), 8, 0)
    assert not called and len(out[0].output_ids) <= 8
