"""Acceptance per category (chat, code, tool_calls, math) and per drafted position in
`eyas eval`: the categories come from the dataset names; an oracle drafter (always the
target's greedy token) and an adversary (never it) give known figures per category, offline
and served."""

import json
import zlib

import orjson
import pytest
import torch
from test_served import EXPOSITION, no_target_in_process, served_eval  # noqa: F401 (fixture)
from test_speculative import FunctionOfTheTarget, decode, random_drafter

from eyas.backends.vllm.acceptance import served_metrics
from eyas.backends.vllm.conventions import parse_spec_metrics
from eyas.benchmarks.catalog import BENCHMARKS
from eyas.evaluate.categories import category_of, grouped
from eyas.evaluate.config import EvalConfig
from eyas.evaluate.metrics import acceptance_metrics
from eyas.evaluate.result import EvalResult


@pytest.mark.parametrize(
    "name, category",
    [
        ("mt_bench", "chat"),
        ("mt_bench#thinking-on", "chat"),
        ("humaneval", "code"),
        ("bfcl_live_simple", "tool_calls"),
        ("bfcl_multi_turn_base", "tool_calls"),
        ("b6_math", "math"),
        ("b8_reasoning", "math"),
        ("mt_bench_math", "math"),  # math wins over the chat benchmark's name
        ("b7_code", "code"),
        ("mt_bench_coding", "code"),
        ("b1_glaive", "tool_calls"),
        ("b2_hermes", "tool_calls"),
        ("b3_xlam", "tool_calls"),
        ("b4_sharegpt", "chat"),
        ("b5_ultrachat", "chat"),
        ("my_support_tickets", "other"),  # nothing to go by: never guessed
        ("decoder", "other"),  # `code` inside a word is not the code category
    ],
)
def test_a_dataset_name_gives_its_category(name, category):
    assert category_of(name) == category


def test_every_benchmark_eyas_knows_has_a_category():
    assert {b.category for b in BENCHMARKS.values()} <= {"chat", "code", "tool_calls", "math"}
    assert {category_of(n) for n in BENCHMARKS if n.startswith("bfcl_")} == {"tool_calls"}
    assert list(grouped(["b7_code", "b4_sharegpt", "b6_math", "zz"])) == [
        "chat",
        "code",
        "math",
        "other",
    ]


def test_acceptance_rate_per_position_is_unconditional():
    # 4 verify steps accepting 3, 1, 0, 2 drafts of 3
    m = acceptance_metrics([3, 1, 0, 2], [4, 2, 1, 3], 3)
    assert m["acceptance_rate_per_position"] == [0.75, 0.5, 0.25]  # 3, 2, 1 of 4 steps
    assert m["per_position"] == [0.75, round(2 / 3, 4), 0.5]  # given the ones before


def test_vllm_counters_give_the_rate_vllm_logs():
    """vLLM's "Per-position acceptance rate" (v1/spec_decode/metrics.py,
    SpecDecodingLogging.log): accepted tokens per position over drafts."""
    before = parse_spec_metrics(
        EXPOSITION.format(drafts=10, draft_tokens=30, accepted=12, p0=6, p1=4, p2=2)
    )
    after = parse_spec_metrics(
        EXPOSITION.format(drafts=257, draft_tokens=771, accepted=594, p0=227, p1=192, p2=175)
    )
    got = served_metrics(before, after, 3)
    assert got["acceptance_rate_per_position"] == [
        round(221 / 247, 4),
        round(188 / 247, 4),
        round(173 / 247, 4),
    ]


@pytest.fixture(scope="module")
def target(toy_tiny):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(toy_tiny, dtype=torch.float32).eval()


@pytest.mark.slow
def test_offline_eval_reports_oracle_and_adversary_categories(
    monkeypatch, tmp_path, toy_tiny, target
):
    """Code prompts drafted by an oracle, chat prompts by an adversary: code accepts every
    draft, chat none; the whole run is their step-weighted mix."""
    import eyas.evaluate.offline as offline
    from eyas.render import Renderer
    from eyas.sources import convert_rows
    from eyas.toy.datasets import FAMILIES, family_rows

    r = Renderer(toy_tiny)
    prompts = []
    for name in ("b7_code", "b4_sharegpt"):
        fam = next(f for f in FAMILIES if f.name == name)
        for i, conv in enumerate(list(convert_rows(family_rows(fam, 1, 13), fam.format, name))):
            ids = r.render_conversation(conv).prompt_ids
            prompts.append({"id": f"{name}-{i}", "dataset": name, "prompt_ids": ids})
    oracle_prompts = {tuple(p["prompt_ids"]) for p in prompts if p["dataset"] == "b7_code"}
    k, steps = 3, 4
    n = 1 + (k + 1) * steps  # the prefill token, then full verify steps (no stop tokens)

    def decode_one(target_, drafter, prompt_ids, cfg, stop, gen):
        if tuple(prompt_ids) in oracle_prompts:
            choose = lambda greedy, v: greedy  # noqa: E731
        else:
            choose = lambda greedy, v: (greedy + 1) % v  # noqa: E731
        return decode(
            target, FunctionOfTheTarget(target, prompt_ids, choose), prompt_ids, k, n, set()
        )

    monkeypatch.setattr(offline, "decode_one", decode_one)
    monkeypatch.setattr(offline, "load_drafter", lambda *a, **kw: random_drafter(target))
    paths = {"target": toy_tiny, "drafter": tmp_path, "input": tmp_path}
    cfg = EvalConfig(**paths, k=k, max_new_tokens=n, lossless_check=False)
    out = offline.evaluate_offline(cfg, prompts, log=lambda s: None)
    code, chat = out["categories"]["code"], out["categories"]["chat"]
    assert list(out["categories"]) == ["chat", "code"]
    assert code["datasets"] == ["b7_code"] and chat["datasets"] == ["b4_sharegpt"]
    assert code["acceptance_length"] == k + 1
    assert code["per_position"] == [1.0] * k and code["acceptance_rate_per_position"] == [1.0] * k
    assert chat["acceptance_length"] == 1.0
    assert chat["acceptance_rate_per_position"] == [0.0] * k
    assert chat["verify_steps"] == sum(
        1 + (k + 1) * steps - 1 for p in prompts if "share" in p["id"]
    )
    share = code["verify_steps"] / (code["verify_steps"] + chat["verify_steps"])
    assert out["acceptance_rate_per_position"] == [round(share, 4)] * k
    assert code["prompts"] + chat["prompts"] == len(prompts)


@pytest.mark.usefixtures("no_target_in_process")
def test_served_vllm_eval_reports_categories_from_the_counters(tmp_path, toy_tiny, toy_samples):
    """The fake vLLM's counters are seeded per prompt: replayed per category, they are the
    exact figures each category must report; the typed result reads them back."""
    from eyas.render import Renderer
    from eyas.testing.fake_sglang import FaultInjector, fake_output
    from eyas.testing.fake_vllm import FakeVLLM
    from eyas.testing.server import fake_vllm_server

    with fake_vllm_server("--spec-k", "3") as spec:
        res, out = served_eval(tmp_path, toy_tiny, toy_samples, "vllm", spec)
    assert res.exit_code == 0, res.output
    stop = Renderer(toy_tiny).stop_token_ids()
    fakes: dict[str, FakeVLLM] = {}
    for line in toy_samples.read_text().splitlines():
        row = json.loads(line)
        fake = fakes.setdefault(category_of(row["dataset"]), FakeVLLM(FaultInjector(), spec_k=3))
        ids, _ = fake_output(row["prompt_ids"], 40, stop)
        fake._count_spec(len(ids), zlib.crc32(orjson.dumps(row["prompt_ids"])))
    assert set(out["categories"]) == set(fakes) == {"chat", "code", "tool_calls", "math"}
    for cat, fake in fakes.items():
        got, drafts = out["categories"][cat], fake.spec["num_drafts"]
        assert got["verify_steps"] == drafts
        assert got["acceptance_length"] == pytest.approx(
            1 + fake.spec["num_accepted_tokens"] / drafts, abs=1e-4
        )
        assert got["acceptance_rate_per_position"] == [round(p / drafts, 4) for p in fake.per_pos]
    result = EvalResult.from_dict(out)
    assert result.categories["math"].datasets == ["b6_math", "b8_reasoning"]
    assert EvalResult.from_dict(result.to_dict()) == result
    assert "tool_calls" in res.output  # the CLI's table has the category rows
