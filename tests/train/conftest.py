import json

import pytest

from eyas.records import Sample
from eyas.render import Renderer
from eyas.render.renderer import last_assistant_index
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.train import completion_text


@pytest.fixture(scope="session")
def toy_samples(tmp_path_factory, toy_tiny):
    """Reference-completion samples on the tiny target's tokenizer (interchange JSONL)."""
    renderer = Renderer(toy_tiny)
    rows = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 5, seed=77), fam.format, fam.name):
            if not hasattr(conv, "messages"):
                continue
            msgs, _ = renderer.prepare(conv)
            turn = last_assistant_index(msgs)
            prompt = renderer.encode(renderer.render_text(msgs[:turn], conv.tools))
            output = renderer.encode(completion_text(msgs[turn]))
            rows.append(
                Sample(
                    conv.id,
                    conv.dataset,
                    prompt,
                    output,
                    "stop",
                    output[-1],
                    conv.messages,
                    conv.tools,
                    "local",
                    {"max_new_tokens": 256},
                    turn=turn,
                ).to_dict()
            )
    path = tmp_path_factory.mktemp("samples") / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
