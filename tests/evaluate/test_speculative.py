"""Speculative decoding: oracle and adversary drafters, losslessness, distribution at T=1."""

import json

import pytest
import torch

import eyas.evaluate.speculative as spec
from eyas.drafter.model import DrafterConfig, Eagle3Drafter
from eyas.evaluate.metrics import acceptance_metrics
from eyas.evaluate.speculative import greedy_reference, speculative_decode
from eyas.render import Renderer


def random_drafter(target, aux=(1, 2, 3), seed=0):
    torch.manual_seed(seed)
    c = target.config
    vocab = target.get_output_embeddings().weight.shape[0]
    cfg = DrafterConfig(
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        vocab_size=vocab,
        draft_vocab_size=vocab,
        target_hidden_size=c.hidden_size,
        aux_layer_ids=list(aux),
    )
    model = Eagle3Drafter(cfg).eval()
    with torch.no_grad():
        model.embed_tokens.weight.copy_(target.get_input_embeddings().weight)
        model.t2d.fill_(True)
    return model


@pytest.fixture(scope="module")
def target(toy_tiny):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(toy_tiny, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts(toy_tiny):
    from eyas.sources import convert_rows
    from eyas.toy.datasets import FAMILIES, family_rows

    r = Renderer(toy_tiny)
    out = []
    for fam in FAMILIES[:6]:
        for conv in list(convert_rows(family_rows(fam, 2, seed=13), fam.format, fam.name))[:2]:
            out.append(r.render_conversation(conv).prompt_ids)
    return out


class _OracleCache(spec.DraftCache):
    def __init__(self):
        super().__init__()
        self.tokens = []

    def __len__(self):
        return len(self.tokens)

    def crop(self, length):
        self.tokens = self.tokens[:length]


def _patch_drafter(monkeypatch, target, prompt, choose):
    """Replace the drafter with a function of the target: `choose(greedy_id) -> draft id`."""
    state = {}

    def fake_forward(model, input_ids, hidden, cache):
        cache.tokens += input_ids[0].tolist()
        seq = [state["first"], *cache.tokens]  # x_0 followed by x_{j+1} for each position j
        with torch.no_grad():
            logits = target(input_ids=torch.tensor([seq])).logits[0, -input_ids.shape[1] :]
        vocab = logits.shape[-1]
        out = torch.full((1, input_ids.shape[1], vocab), -1e9)
        for i, row in enumerate(logits):
            out[0, i, choose(int(row.argmax()), vocab)] = 0.0
        return out, torch.zeros_like(hidden)

    state["first"] = prompt[0]
    monkeypatch.setattr(spec, "DraftCache", _OracleCache)
    monkeypatch.setattr(spec, "draft_forward", fake_forward)


@pytest.mark.parametrize("k", [2, 4])
def test_oracle_drafter_gives_k_plus_one(monkeypatch, target, prompts, toy_tiny, k):
    drafter = random_drafter(target)
    for p in prompts[:3]:  # no stop tokens: every run reaches the full length
        _patch_drafter(monkeypatch, target, p, lambda greedy, v: greedy)
        n = 1 + (k + 1) * 20  # the prefill token, then 20 full verify steps
        res = speculative_decode(target, drafter, p, k, n, set(), [1, 2, 3])
        assert res.accepted == [k] * 20
        m = acceptance_metrics(res.accepted, res.produced, k)
        assert m["acceptance_length"] == k + 1 and m["mean_accepted_drafts"] == k
        assert m["per_position"] == [1.0] * k and m["histogram"][k] == 20
        assert res.tokens == greedy_reference(target, p, n, set())


def test_adversary_drafter_gives_one(monkeypatch, target, prompts):
    drafter = random_drafter(target)
    p = prompts[0]
    _patch_drafter(monkeypatch, target, p, lambda greedy, v: (greedy + 1) % v)
    res = speculative_decode(target, drafter, p, 3, 40, set(), [1, 2, 3])
    m = acceptance_metrics(res.accepted, res.produced, 3)
    assert m["acceptance_length"] == 1.0 and m["histogram"][0] == m["verify_steps"]
    assert m["histogram"] == [m["verify_steps"], 0, 0, 0]
    assert res.tokens == greedy_reference(target, p, 40, set())


def test_lossless_at_temperature_zero_with_a_random_drafter(target, prompts, toy_tiny):
    stop = set(Renderer(toy_tiny).stop_token_ids())
    for seed, p in enumerate(prompts):
        drafter = random_drafter(target, seed=seed)
        res = speculative_decode(target, drafter, p, 3, 48, stop, [1, 2, 3])
        assert res.tokens == greedy_reference(target, p, 48, stop)
        assert sum(res.produced) == len(res.tokens) - 1  # all but the prefill token


def test_distribution_is_the_targets_at_temperature_one():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=6,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    target = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)  # a peaked, non-uniform distribution
    drafter = random_drafter(target, aux=(0, 1, 2), seed=3)
    prompt = [1, 2, 3]
    with torch.no_grad():
        p1 = torch.softmax(target(input_ids=torch.tensor([prompt])).logits[0, -1], -1)
        seconds = torch.softmax(
            target(input_ids=torch.tensor([[*prompt, t] for t in range(6)])).logits[:, -1], -1
        )
    exact = (p1[:, None] * seconds).sum(0)  # P(x_{P+1}) marginalised over x_P
    gen = torch.Generator().manual_seed(5)
    counts = torch.zeros(6)
    n = 2500
    for _ in range(n):
        res = speculative_decode(target, drafter, prompt, 2, 2, set(), [0, 1, 2], 1.0, gen)
        counts[res.tokens[1]] += 1
    tv = 0.5 * float((counts / n - exact).abs().sum())
    assert tv < 0.04, (counts / n, exact)


def test_eval_command_reports_per_dataset(tmp_path, target, toy_tiny):
    from typer.testing import CliRunner

    from eyas.cli import app
    from eyas.render.run import render_file
    from eyas.sources.run import convert_file
    from eyas.toy.datasets import FAMILIES, family_rows
    from eyas.train.checkpoint import save_drafter

    drafter = random_drafter(target)
    save_drafter(drafter, tmp_path / "drafter", {})
    renderer = Renderer(toy_tiny)
    for fam in FAMILIES[:2]:
        src = tmp_path / f"{fam.name}.src.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 3, seed=2)))
        convert_file(src, tmp_path / "c" / f"{fam.name}.jsonl", fam.format, fam.name)
        render_file(
            renderer, tmp_path / "c" / f"{fam.name}.jsonl", tmp_path / "p" / f"{fam.name}.jsonl"
        )
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--target",
            str(toy_tiny),
            "--drafter",
            str(tmp_path / "drafter"),
            "--input",
            str(tmp_path / "p"),
            "--k",
            "3",
            "--max-new-tokens",
            "24",
            "--json",
            str(tmp_path / "e.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads((tmp_path / "e.json").read_text())
    assert set(out) >= {"acceptance_length", "per_position", "lossless", "datasets"}
    assert out["lossless"] is True and set(out["datasets"]) == {"b1_glaive", "b2_hermes"}
    # the figures are consistent with one another: every verify step is in the histogram,
    # and the overall acceptance length is the steps-weighted mean of the datasets'
    assert len(out["per_position"]) == 3 and sum(out["histogram"]) == out["verify_steps"]
    per = out["datasets"].values()
    weighted = sum(d["acceptance_length"] * d["verify_steps"] for d in per) / out["verify_steps"]
    assert abs(out["acceptance_length"] - weighted) < 1e-3
    # a random drafter is almost never accepted
    assert out["acceptance_length"] < 1.5 and out["histogram"][0] > out["histogram"][3]
