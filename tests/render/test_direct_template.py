"""The direct template path renders exactly what `apply_chat_template` renders."""

from __future__ import annotations

import copy

import pytest

from eyas.render import Renderer
from eyas.render.template import DirectTemplate
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows


def _reference(r: Renderer, messages: list[dict], tools: list[dict], gen: bool, **kw) -> str:
    kwargs = {**r.template_kwargs, **kw}
    tools = tools or None
    if tools:
        tools, ts = r._prepared_tools(tools)
        if ts is not None:
            kwargs["tools_ts_str"] = ts
    return r.tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=gen, tokenize=False, **kwargs
    )


@pytest.mark.parametrize("which", ["kimi_dir", "qwen_dir"])
def test_direct_render_is_byte_identical_on_every_toy_family(which, request):
    r = Renderer(request.getfixturevalue(which))
    assert r._direct is not None  # verified at construction
    assert r.describe()["template_render_path"] == "direct"
    compared = 0
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 12, seed=5), fam.format, fam.name):
            if not hasattr(conv, "messages"):
                continue
            messages, _ = r.prepare(conv)
            for end in range(1, len(messages) + 1):
                for thinking in (True, False):
                    kw = (
                        {r.model_format.thinking_key: thinking}
                        if r.model_format.thinking_key
                        else {}
                    )
                    for gen in (True, False):
                        got = r.render_text(messages[:end], conv.tools, gen, **kw)
                        assert got == _reference(r, messages[:end], conv.tools, gen, **kw)
                        compared += 1
    assert compared > 500


def test_renderer_falls_back_when_the_direct_path_disagrees(kimi_dir, monkeypatch):
    original = DirectTemplate.render

    def drifted(self, *args, **kwargs):  # a transformers change the probe must catch
        return original(self, *args, **kwargs).replace("<|im_end|>", "<|im_end|>\n")

    monkeypatch.setattr(DirectTemplate, "render", drifted)
    r = Renderer(kimi_dir)
    assert r._direct is None
    assert r.describe()["template_render_path"] == "apply_chat_template"
    messages = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    assert r.render_text(messages, None) == _reference(r, messages, [], True)


def test_normalisation_leaves_the_input_untouched(kimi_dir):
    r = Renderer(kimi_dir)
    fam = next(f for f in FAMILIES if f.name == "b2_hermes")
    for conv in convert_rows(family_rows(fam, 20, seed=3), fam.format, fam.name):
        if hasattr(conv, "messages"):
            before = copy.deepcopy(conv.messages)
            r.prepare(conv)
            assert conv.messages == before
