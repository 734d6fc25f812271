import json

import pytest

from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows
from eyas.toy.samples import reference_sample


@pytest.fixture(scope="session")
def toy_samples(tmp_path_factory, toy_tiny):
    """Reference-completion samples on the tiny target's tokenizer (interchange JSONL)."""
    renderer = Renderer(toy_tiny)
    rows = []
    for fam in FAMILIES:
        for conv in convert_rows(family_rows(fam, 5, seed=77), fam.format, fam.name):
            if hasattr(conv, "messages"):
                s = reference_sample(renderer, conv)
                s.backend, s.sampling = "local", {"max_new_tokens": 256}
                rows.append(s.to_dict())
    path = tmp_path_factory.mktemp("samples") / "samples.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path
