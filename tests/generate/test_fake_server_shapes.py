"""The fake server answers in the shapes real servers use (captured responses, vLLM's schema)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from eyas.testing.fake_sglang import chat_prompt_ids
from eyas.testing.server import fake_sglang_server

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
