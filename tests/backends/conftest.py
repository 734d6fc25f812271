import json

import pytest

from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.toy.datasets import FAMILIES, family_rows


@pytest.fixture(scope="module")
def rendered_prompts(module_tmp, kimi_dir):
    """~20 rendered chat prompts of one toy family, as a prepare stage dir."""
    root = module_tmp("rendered")
    fam = next(f for f in FAMILIES if f.name == "b5_ultrachat")
    src = root / "src.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 20, seed=5)))
    convert_file(src, root / "conv.jsonl", fam.format, fam.name)
    render_file(Renderer(kimi_dir), root / "conv.jsonl", root / "prep" / "rendered" / "b5.jsonl")
    return root / "prep"
