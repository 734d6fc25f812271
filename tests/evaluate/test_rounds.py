"""Evaluation in rounds: a later turn of an MT-Bench-shaped row (`[user, assistant null,
user]`) is asked after the answer of the engine being evaluated, never after a target loaded
in this process; served figures sum every round per dataset, and offline the second prompt is
the one the target's own greedy answer makes."""

import json
import zlib

import orjson
import pytest
import torch
from typer.testing import CliRunner

import eyas.backends.vllm.acceptance as vllm_acceptance
import eyas.evaluate.prompts as eval_prompts
import eyas.evaluate.served as served
from eyas.cli import app
from eyas.generate.multiturn import output_to_message
from eyas.render import Renderer
from eyas.render.renderer import answer_turn
from eyas.testing.fake_sglang import FakeSGLang, FaultInjector, fake_output
from eyas.testing.fake_vllm import FakeVLLM
from eyas.testing.server import fake_sglang_server, fake_vllm_server

QUESTIONS = [
    ("Explain gravity in one sentence.", "Explain rainbows in one sentence."),
    ("Explain tides in one sentence.", "And the moon?"),
    ("What is 9 + 19?", "What is 3 * 3?"),
    ("Tell me a fact about the bee.", "Tell me a fact about the cat."),
    ("Explain photosynthesis in one sentence.", "Explain gravity in one sentence."),
    ("What is 9 - 20?", "What is the sum of 14, 29?"),
    ("Explain the moon in one sentence.", "Why?"),
    ("Tell me a fact about the cat.", "Another one?"),
]


def two_turn_rows(renderer, path, n=len(QUESTIONS)):
    """Rendered MT-Bench-shaped rows over two datasets, prompted at their first answer."""
    rows = []
    for i, (first, second) in enumerate(QUESTIONS[:n]):
        messages = [
            {"role": "user", "content": first},
            {"role": "assistant", "content": None},
            {"role": "user", "content": second},
        ]
        prepared, _ = renderer.prepare_messages(messages)
        turn = answer_turn(prepared)
        rows.append(
            {
                "id": f"q{i}",
                "dataset": ("writing", "math")[i % 2],
                "prompt_ids": renderer.render_turn(prepared, [], turn, []).prompt_ids,
                "messages": messages,
                "tools": [],
                "turn": turn,
            }
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows


def second_prompt(renderer, row, answer_ids):
    """The second question's prompt after `answer_ids`, built here from the template."""
    history = [row["messages"][0], output_to_message(renderer, answer_ids), row["messages"][2]]
    prepared, _ = renderer.prepare_messages(history)
    return renderer.encode(renderer.render_text(prepared, [], add_generation_prompt=True))


@pytest.fixture
def no_target_in_process(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("served evaluation loaded the target in process")

    monkeypatch.setattr("eyas.hf_models.load_frozen_lm", refuse)
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained", refuse)


@pytest.fixture
def sent(monkeypatch):
    """(id, prompt ids, output ids) of every request served evaluation makes, in order."""
    calls = []
    real = served._one

    async def spy(pool, p, cfg):
        gen = await real(pool, p, cfg)
        calls.append((p["id"], p["prompt_ids"], gen.output_ids))
        return gen

    monkeypatch.setattr(served, "_one", spy)
    return calls


def run_cli(tmp_path, args):
    out = tmp_path / "e.json"
    res = CliRunner().invoke(app, [str(a) for a in [*args, "--json", out]])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


@pytest.mark.slow  # the fake SGLang emitting the toy vocabulary: a few seconds
def test_sglang_second_turns_follow_the_served_first_answers(
    tmp_path, toy_tiny, no_target_in_process, sent
):
    renderer = Renderer(toy_tiny)
    stop = renderer.stop_token_ids()
    rows = two_turn_rows(renderer, tmp_path / "mt.jsonl")
    with fake_sglang_server("--tokenizer", str(toy_tiny), "--spec-steps", "3") as url:
        args = [
            "eval",
            "--target",
            toy_tiny,
            "--drafter",
            tmp_path,
            "--input",
            tmp_path / "mt.jsonl",
        ]
        args += ["--backend", "sglang", "--url", url, "--k", "3", "--max-new-tokens", "128"]
        out = run_cli(tmp_path, args)
    served_by_id = {pid: (prompt, output) for pid, prompt, output in sent}
    assert len(served_by_id) == len(sent)  # no prompt is asked twice
    fake = FakeSGLang(tokenizer_dir=str(toy_tiny), spec_steps=3)
    expected_second, stopped = {}, {}
    for row in rows:
        prompt, answer = served_by_id[row["id"]]
        assert prompt == row["prompt_ids"]
        # the answer is the server's (the fake's output is a function of the prompt)
        assert (
            answer == fake._vocab_output(prompt, {"max_new_tokens": 128, "stop_token_ids": stop})[0]
        )
        if output_to_message(renderer, answer).get("tool_calls"):
            stopped["tool_results_unavailable"] = stopped.get("tool_results_unavailable", 0) + 1
        else:
            expected_second[f"{row['id']}#3"] = second_prompt(renderer, row, answer)
    assert expected_second and stopped  # both kinds occur in these rows
    seconds = {pid: served_by_id[pid][0] for pid in served_by_id if "#" in pid}
    assert seconds == expected_second
    for pid, prompt in seconds.items():
        first_answer = served_by_id[pid.split("#")[0]][1]
        content = output_to_message(renderer, first_answer)["content"]
        assert content and content in renderer.tokenizer.decode(prompt)
    assert out["follow_ups"]["rounds"] == [len(rows), len(expected_second)]
    assert out["follow_ups"]["stopped"] == stopped
    assert out["follow_ups"]["asked_after"].startswith("the evaluated run's own outputs")
    assert out["settings"]["prompts"] == len(rows) + len(expected_second)
    # every dataset's figures are those of both rounds' requests, summed
    for name, d in out["datasets"].items():
        mine = [(pid, p, o) for pid, (p, o) in served_by_id.items() if _dataset(rows, pid) == name]
        steps = sum(
            fake._spec_meta(len(o), zlib.crc32(orjson.dumps(p)))["spec_verify_ct"]
            for _, p, o in mine
        )
        produced = sum(len(o) for _, _, o in mine)
        assert any("#" in pid for pid, _, _ in mine)
        assert d["prompts"] == len(mine) and d["verify_steps"] == steps
        assert d["acceptance_length"] == pytest.approx((produced - len(mine)) / steps, abs=1e-4)
    assert out["verify_steps"] == sum(d["verify_steps"] for d in out["datasets"].values())


def _dataset(rows, pid):
    return next(r["dataset"] for r in rows if r["id"] == pid.split("#")[0])


def test_vllm_rounds_sum_counters_and_the_baseline_answers_the_same_prompts(
    tmp_path, toy_tiny, no_target_in_process, sent
):
    renderer = Renderer(toy_tiny)
    stop = renderer.stop_token_ids()
    rows = two_turn_rows(renderer, tmp_path / "mt.jsonl", n=6)
    spec = fake_vllm_server("--spec-k", "3", "--fixed-len", "12")
    with spec as url, fake_vllm_server("--fixed-len", "12") as base:
        args = [
            "eval",
            "--target",
            toy_tiny,
            "--drafter",
            tmp_path,
            "--input",
            tmp_path / "mt.jsonl",
        ]
        args += ["--backend", "vllm", "--url", url, "--baseline-url", base, "--k", "3"]
        out = run_cli(tmp_path, [*args, "--max-new-tokens", "32"])
    # the drafter's run, then the baseline's two runs of the same prompts, round by round
    n = 2 * len(rows)
    spec_calls, baseline_calls = sent[:n], sent[n:]
    assert [len(baseline_calls)] == [2 * n]
    prompts = {pid: p for pid, p, _ in spec_calls}
    assert all(prompts[pid] == p for pid, p, _ in baseline_calls)
    for row in rows:
        answer = next(o for pid, _, o in spec_calls if pid == row["id"])
        assert answer == fake_output(row["prompt_ids"], 32, stop, fixed_len=12)[0]
        assert prompts[f"{row['id']}#3"] == second_prompt(renderer, row, answer)
    assert out["follow_ups"]["rounds"] == [len(rows), len(rows)]
    check = out["lossless_check"]
    assert out["lossless"] is True and check["prompts"] == n
    # the counters of each dataset, read around each round, summed: those of its requests
    for name, d in out["datasets"].items():
        fake = FakeVLLM(FaultInjector(), spec_k=3)
        mine = [(p, o) for pid, p, o in spec_calls if _dataset(rows, pid) == name]
        for p, o in mine:
            fake._count_spec(len(o), zlib.crc32(orjson.dumps(p)))
        counts = {**fake.spec, "accepted_per_pos": fake.per_pos}
        assert d == {**vllm_acceptance.counter_figures(counts, 3), "prompts": len(mine)}
    total = [sum(d["histogram"][a] for d in out["datasets"].values()) for a in range(4)]
    assert out["histogram"] == total and sum(total) == out["verify_steps"]


def random_drafter_dir(target, path):
    from test_speculative import random_drafter

    from eyas.train.checkpoint import save_drafter

    save_drafter(random_drafter(target), path, {})
    return path


@pytest.mark.slow  # the in-process decoder on CPU: about 10 s
def test_offline_second_turn_is_asked_after_the_targets_greedy_answer(
    tmp_path, toy_tiny, monkeypatch
):
    from transformers import AutoModelForCausalLM

    from eyas.evaluate.speculative import greedy_reference

    target = AutoModelForCausalLM.from_pretrained(toy_tiny, dtype=torch.float32).eval()
    drafter = random_drafter_dir(target, tmp_path / "drafter")
    renderer = Renderer(toy_tiny)
    stop = set(renderer.stop_token_ids())
    # two conversations whose first greedy answer ends within the cap (a cut answer stops its
    # conversation, `truncated_turn`); which ones depends on the toy as built on this machine
    cap = 48
    stopping = [
        i
        for i, row in enumerate(two_turn_rows(renderer, tmp_path / "all.jsonl"))
        if greedy_reference(target, row["prompt_ids"], cap, stop)[-1] in stop
    ]
    assert len(stopping) >= 2, stopping
    rows = [
        r for i, r in enumerate(two_turn_rows(renderer, tmp_path / "all.jsonl")) if i in stopping
    ][:2]
    (tmp_path / "mt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loads, seen, built = [], {}, []
    real_load, real_follow = AutoModelForCausalLM.from_pretrained, eval_prompts.follow_up_prompts

    def counting_load(*a, **k):
        loads.append(a[0])
        return real_load(*a, **k)

    def spy(prompts, outputs, r):  # called per dataset of each round
        more, stopped = real_follow(prompts, outputs, r)
        seen.update({p["id"]: outputs[p["id"]] for p in prompts})
        built.extend(more)
        return more, stopped

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", counting_load)
    monkeypatch.setattr(eval_prompts, "follow_up_prompts", spy)
    args = ["eval", "--target", toy_tiny, "--drafter", drafter, "--input", tmp_path / "mt.jsonl"]
    out = run_cli(tmp_path, [*args, "--k", "2", "--max-new-tokens", str(cap)])
    assert loads == [str(toy_tiny)]  # the target, once for both rounds
    assert sorted(p["id"] for p in built) == sorted(f"{r['id']}#3" for r in rows)
    for row in rows:
        greedy = greedy_reference(target, row["prompt_ids"], cap, stop)
        assert seen[row["id"]] == greedy
        follow = next(p for p in built if p["id"] == f"{row['id']}#3")
        assert follow["prompt_ids"] == second_prompt(renderer, row, greedy)
        # round 2 decoded exactly that prompt: its output is the prompt's greedy answer
        assert seen[follow["id"]] == greedy_reference(target, follow["prompt_ids"], cap, stop)
    assert out["lossless"] is True and out["follow_ups"]["rounds"] == [2, 2]
    per_dataset = {r["dataset"]: 0 for r in rows}
    for r in rows:
        per_dataset[r["dataset"]] += 2  # the first prompt and its follow-up
    assert {name: d["prompts"] for name, d in out["datasets"].items()} == per_dataset
    assert sum(out["histogram"]) == out["verify_steps"]
    assert out["verify_steps"] == sum(d["verify_steps"] for d in out["datasets"].values())


def test_above_temperature_zero_the_result_says_later_turns_follow_the_runs_samples(
    tmp_path, toy_tiny, no_target_in_process, sent
):
    renderer = Renderer(toy_tiny)
    two_turn_rows(renderer, tmp_path / "mt.jsonl", n=2)
    with fake_vllm_server("--spec-k", "3", "--fixed-len", "8") as url:
        args = [
            "eval",
            "--target",
            toy_tiny,
            "--drafter",
            tmp_path,
            "--input",
            tmp_path / "mt.jsonl",
        ]
        args += ["--backend", "vllm", "--url", url, "--temperature", "0.7"]
        out = run_cli(tmp_path, [*args, "--max-new-tokens", "16"])
    follow = out["follow_ups"]
    assert follow["rounds"] == [2, 2] and sorted(pid for pid, _, _ in sent)[-1] == "q1#3"
    assert follow["asked_after"].startswith("the evaluated run's own samples at temperature 0.7")
    assert out["lossless"] is None and "temperature 0 only" in out["lossless_check"]["note"]


def test_counter_deltas_of_two_rounds_sum_to_the_figures_of_the_whole_span():
    snaps = [
        {"num_drafts": 10, "num_accepted_tokens": 12, "accepted_per_pos": [6, 4, 2]},
        {"num_drafts": 57, "num_accepted_tokens": 90, "accepted_per_pos": [40, 30, 20]},
        {"num_drafts": 100, "num_accepted_tokens": 131, "accepted_per_pos": [70, 41, 20]},
    ]
    rounds = vllm_acceptance.add_counts(
        vllm_acceptance.counter_delta(snaps[0], snaps[1]),
        vllm_acceptance.counter_delta(snaps[1], snaps[2]),
    )
    whole = vllm_acceptance.served_metrics(snaps[0], snaps[2], 3)
    assert vllm_acceptance.counter_figures(rounds, 3) == whole
    assert whole["histogram"] == [90 - 64, 64 - 37, 37 - 18, 18] and whole["verify_steps"] == 90
    # a mean of the two rounds' acceptance lengths is not the run's
    a, b = (vllm_acceptance.served_metrics(snaps[i], snaps[i + 1], 3) for i in (0, 1))
    assert (a["acceptance_length"] + b["acceptance_length"]) / 2 != whole["acceptance_length"]
