"""Speculative decoding: oracle and adversary drafters, losslessness, distribution at T=1."""

import json

import pytest
import torch

from eyas.drafter.eagle3.model import Eagle3Config, Eagle3Drafter
from eyas.drafter.registry import method_of
from eyas.evaluate.metrics import acceptance_metrics
from eyas.evaluate.speculative import greedy_reference, speculative_decode
from eyas.render import Renderer


def random_drafter(target, aux=(1, 2, 3), seed=0):
    torch.manual_seed(seed)
    c = target.config
    vocab = target.get_output_embeddings().weight.shape[0]
    cfg = Eagle3Config(
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


class FunctionOfTheTarget:
    """A proposer (`eyas.drafter.method.Proposer`) that drafts `choose(greedy id)` along the
    target's own greedy continuation of the verified context."""

    def __init__(self, target, prompt, choose):
        self.aux_layers = [1, 2, 3]
        self.target, self.choose = target, choose
        self.context = [prompt[0]]  # x_0, then each verified position's following token

    def extend(self, tokens_after, aux):
        self.context += tokens_after

    def propose(self, k, temperature, generator):
        cur, drafts = list(self.context), []
        with torch.no_grad():
            for _ in range(k):
                logits = self.target(input_ids=torch.tensor([cur])).logits[0, -1]
                d = self.choose(int(logits.argmax()), logits.shape[-1])
                drafts.append(d)
                cur.append(d)
        return drafts, None


def decode(target, proposer, prompt, k, n, stop, temperature=0.0, gen=None):
    if not hasattr(proposer, "propose"):  # a drafter model: its method's proposer
        proposer = method_of(proposer).proposer(proposer)
    return speculative_decode(
        target,
        proposer,
        prompt,
        k=k,
        max_new_tokens=n,
        stop_ids=stop,
        temperature=temperature,
        generator=gen,
    )


@pytest.mark.parametrize("k", [2, 4])
def test_oracle_drafter_gives_k_plus_one(target, prompts, k):
    for p in prompts[:3]:  # no stop tokens: every run reaches the full length
        oracle = FunctionOfTheTarget(target, p, lambda greedy, v: greedy)
        n = 1 + (k + 1) * 20  # the prefill token, then 20 full verify steps
        res = decode(target, oracle, p, k, n, set())
        assert res.accepted == [k] * 20
        m = acceptance_metrics(res.accepted, res.produced, k)
        assert m["acceptance_length"] == k + 1 and m["mean_accepted_drafts"] == k
        assert m["per_position"] == [1.0] * k and m["histogram"][k] == 20
        assert res.tokens == greedy_reference(target, p, n, set())


def test_adversary_drafter_gives_one(target, prompts):
    p = prompts[0]
    adversary = FunctionOfTheTarget(target, p, lambda greedy, v: (greedy + 1) % v)
    res = decode(target, adversary, p, 3, 40, set())
    m = acceptance_metrics(res.accepted, res.produced, 3)
    assert m["acceptance_length"] == 1.0 and m["histogram"][0] == m["verify_steps"]
    assert m["histogram"] == [m["verify_steps"], 0, 0, 0]
    assert res.tokens == greedy_reference(target, p, 40, set())


def test_lossless_at_temperature_zero_with_a_random_drafter(target, prompts, toy_tiny):
    stop = set(Renderer(toy_tiny).stop_token_ids())
    for seed, p in enumerate(prompts):
        drafter = random_drafter(target, seed=seed)
        res = decode(target, drafter, p, 3, 48, stop)
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
        res = decode(target, drafter, prompt, 2, 2, set(), 1.0, gen)
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
