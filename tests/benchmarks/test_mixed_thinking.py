"""One pipeline config, both thinking modes: a per-dataset `thinking` renders (and plans the
generation of) that dataset in its own mode."""

import json

from eyas.generate.config import PipelineConfig
from eyas.generate.jobs import load_jobs
from eyas.generate.prepare import prepare
from eyas.render import Renderer


def test_datasets_render_in_their_own_thinking_mode(tmp_path, kimi_dir):
    src = tmp_path / "chat.jsonl"
    rows = [{"messages": [{"role": "user", "content": f"question {i}"}]} for i in range(3)]
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = PipelineConfig.model_validate(
        {
            "model": {"dir": str(kimi_dir)},
            "run": {"dir": str(tmp_path / "runs"), "name": "mix"},
            "datasets": [
                {"name": "think", "path": str(src), "format": "openai", "thinking": True},
                {"name": "plain", "path": str(src), "format": "openai", "thinking": False},
                {"name": "default", "path": str(src), "format": "openai"},
            ],
        }
    )
    renderer = Renderer(kimi_dir)
    summary = prepare(cfg, renderer)
    assert {k: v.thinking for k, v in summary.items()} == {
        "think": True,
        "plain": False,
        "default": None,
    }
    rendered = cfg.stage_dir("prepare") / "rendered"
    text = {
        name: [
            json.loads(x)["prompt_text"]
            for x in (rendered / f"{name}.jsonl").read_text().splitlines()
        ]
        for name in summary
    }
    msgs = [{"role": "user", "content": "question 0"}]
    assert text["think"][0] == renderer.render_text(msgs, thinking=True)
    assert text["plain"][0] == renderer.render_text(msgs, thinking=False)
    assert text["think"][0] != text["plain"][0]
    jobs, _ = load_jobs(cfg, renderer, set())
    assert {j.dataset: j.thinking for j in jobs} == {"think": True, "plain": False, "default": None}
