"""The fake server answers in the shapes real servers use (captured responses, vLLM's schema)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from eyas.testing.fake_sglang import chat_prompt_ids
from eyas.testing.server import fake_sglang_server, fake_vllm_server

REFERENCE = Path(__file__).parent.parent / "reference"


def _post(url: str, payload: dict) -> dict:
    req = urllib.request.Request(
        url, json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _shape(value):
    """Key structure and value types, recursively (list items by their first element)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def test_generate_matches_the_captured_sglang_response():
    real = json.loads((REFERENCE / "sglang-generate-response.json").read_text())
    with fake_sglang_server() as url:
        fake = _post(
            url + "/generate",
            {
                "input_ids": [4, 617, 612, 78, 7, 74, 106, 8, 6, 3349, 2129, 7],
                "sampling_params": {"max_new_tokens": 16, "temperature": 0},
                "return_logprob": True,
            },
        )
    assert _shape(fake) == _shape(real)
    assert fake["meta_info"]["finish_reason"] == {"type": "length", "length": 16}
    assert len(fake["output_ids"]) == fake["meta_info"]["completion_tokens"] == 16


def test_completions_match_the_captured_vllm_response(tmp_path):
    real = json.loads((REFERENCE / "vllm-completions-response.json").read_text())
    prompt = real["choices"][0]["prompt_token_ids"]
    payload = {"model": "m", "prompt": prompt, "max_tokens": 16, "return_token_ids": True}
    with fake_vllm_server("--fixed-len", "40") as url:
        fake = _post(url + "/v1/completions", payload)
    real_shape, fake_shape = _shape(real), _shape(fake)
    # the real request asked for logprobs (`logprobs: 1`); eyas never does
    real_shape["choices"][0]["logprobs"] = fake_shape["choices"][0]["logprobs"]
    assert fake_shape == real_shape
    choice = fake["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 16
    assert choice["prompt_token_ids"] == prompt and fake["usage"]["completion_tokens"] == 16


@pytest.mark.parametrize("want_ids", [True, False])
def test_chat_answers_in_vllm_shape_with_return_token_ids(want_ids):
    messages = [{"role": "user", "content": "w40 w41 hello w42"}]
    with fake_sglang_server("--fixed-len", "5") as url:
        body = _post(
            url + "/v1/chat/completions",
            {"model": "m", "messages": messages, "max_tokens": 20, "return_token_ids": want_ids},
        )
    choice = body["choices"][0]
    # vLLM's ChatCompletionResponse: prompt ids at the top level, output ids per choice.
    assert {"prompt_token_ids", "prompt_logprobs", "usage", "choices"} <= body.keys()
    assert {"message", "finish_reason", "stop_reason", "token_ids", "logprobs"} <= choice.keys()
    if want_ids:
        assert body["prompt_token_ids"] == chat_prompt_ids(messages)
        assert body["prompt_token_ids"][1:3] == [40, 41]
        assert len(choice["token_ids"]) == body["usage"]["completion_tokens"] == 6
        assert choice["token_ids"][-1] == 2 and choice["finish_reason"] == "stop"
        words = choice["message"]["content"].split()
        assert words == [f"w{t}" for t in choice["token_ids"][:-1]]
    else:
        assert body["prompt_token_ids"] is None and choice["token_ids"] is None


def _status(url: str, payload: dict | None = None) -> int:
    import urllib.error

    try:
        if payload is None:
            with urllib.request.urlopen(url, timeout=10) as resp:
                return resp.status
        _post(url, payload)
        return 200
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_fake_behaves_like_sglang(toy_tiny):
    """Vocabulary ids with think and tool markers, stops on a stop id or EOS with the id kept,
    text decoded per skip_special_tokens, 503 while loading, 400 past the context length,
    server info, and no ids on an abort before prefill."""
    import time

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(toy_tiny)
    vocab = tok.get_vocab()
    end = vocab["<|im_end|>"]
    args = ("--tokenizer", str(toy_tiny), "--context-length", "64", "--load-s", "1.5")
    with fake_sglang_server(*args) as url:
        assert _status(url + "/health") == 503
        assert _status(url + "/generate", {"input_ids": [5, 6], "sampling_params": {}}) == 503
        time.sleep(1.6)
        assert _status(url + "/health") == 200
        info = json.loads(urllib.request.urlopen(url + "/get_server_info").read())
        assert info["context_length"] == 64 and "version" in info
        assert _status(url + "/generate", {"input_ids": [5] * 64, "sampling_params": {}}) == 400
        markers = {vocab["</think>"], vocab["<|tool_calls_section_begin|>"]}
        seen_markers: set[int] = set()
        for seed in range(12):
            prompt = [7 + seed, 9, 11]
            params = {"max_new_tokens": 200, "stop_token_ids": [end], "skip_special_tokens": False}
            out = _post(url + "/generate", {"input_ids": prompt, "sampling_params": params})
            ids = out["output_ids"]
            assert all(0 <= t < len(vocab) for t in ids)
            assert ids[-1] == end and out["meta_info"]["finish_reason"] == {
                "type": "stop",
                "matched": end,
            }
            assert end not in ids[:-1]
            assert out["text"] == tok.decode(ids, skip_special_tokens=False)
            seen_markers |= markers & set(ids)
            skipped = _post(
                url + "/generate",
                {"input_ids": prompt, "sampling_params": {**params, "skip_special_tokens": True}},
            )
            assert skipped["output_ids"] == ids and "</think>" not in skipped["text"]
        assert seen_markers == markers  # reasoning and tool-call sections both occur
        eos = _post(
            url + "/generate", {"input_ids": [3, 4, 5], "sampling_params": {"max_new_tokens": 200}}
        )
        assert eos["output_ids"][-1] == tok.eos_token_id  # EOS stops without stop_token_ids
    with fake_sglang_server("--fault-rate", "1", "--faults", "abort") as url:
        out = _post(url + "/generate", {"input_ids": [5, 6], "sampling_params": {}})
        assert out["output_ids"] == [] and out["meta_info"]["finish_reason"]["type"] == "abort"
        assert out["meta_info"]["completion_tokens"] == 0
