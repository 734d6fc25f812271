import json

import pytest

from eyas.render import Renderer
from eyas.render.run import render_file
from eyas.sources.run import convert_file
from eyas.toy.datasets import FAMILIES, family_rows


@pytest.fixture(scope="module")
def rendered(module_tmp, kimi_dir):
    """~120 rendered prompts from three toy families (tools, chat, multi-turn)."""
    root = module_tmp("rendered")
    renderer = Renderer(kimi_dir)
    for name in ("b1_glaive", "b4_sharegpt", "b5_ultrachat"):
        fam = next(f for f in FAMILIES if f.name == name)
        src = root / f"{name}.src.jsonl"
        src.write_text("\n".join(json.dumps(r) for r in family_rows(fam, 50, seed=5)))
        convert_file(src, root / "conv" / f"{name}.jsonl", fam.format, name)
        render_file(
            renderer, root / "conv" / f"{name}.jsonl", root / "prep" / "rendered" / f"{name}.jsonl"
        )
    return root / "prep"
