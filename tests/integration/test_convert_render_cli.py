"""End to end through the CLI: a Glaive file converted and rendered with the K2.5 template."""

import json

from typer.testing import CliRunner

from eyas.cli import app
from eyas.toy.datasets import FAMILIES, family_rows

runner = CliRunner()


def test_glaive_to_native_kimi_prompt(tmp_path, kimi_dir):
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    rows = family_rows(glaive, 40, seed=3)
    src = tmp_path / "glaive.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    conv = tmp_path / "b1.jsonl"
    result = runner.invoke(
        app, ["convert", "--format", "auto", "--dataset", "b1", str(src), str(conv)]
    )
    assert result.exit_code == 0, result.output
    assert "glaive (detected)" in result.output and "invalid_json" in result.output
    out = tmp_path / "b1.rendered.jsonl"
    result = runner.invoke(app, ["render", "--model", str(kimi_dir), str(conv), str(out)])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    converted = conv.read_text().splitlines()
    rejected = [json.loads(x) for x in (tmp_path / "b1.errors.jsonl").read_text().splitlines()]
    assert len(lines) == len(converted) and len(converted) + len(rejected) == 41
    assert {r["reason"] for r in rejected} <= {"invalid_json", "duplicate_conversation"}
    with_tools = [x for x in lines if x["tools"]]
    assert with_tools, "the generator always emits tool rows"
    for line in with_tools:
        text = line["prompt_text"]
        assert text.startswith(
            "<|im_system|>tool_declare<|im_middle|># Tools\n\n## functions\nnamespace functions {"
        )
        # No tool JSON survives in any system turn.
        system_turns = [t for t in text.split("<|im_system|>")[2:] if t.startswith("system")]
        assert all('"parameters"' not in t and "following functions" not in t for t in system_turns)
        assert line["prompt_ids"] and isinstance(line["prompt_ids"][0], int)
    manifest = json.loads((tmp_path / "b1.rendered.manifest.json").read_text())
    assert manifest["probe"]["declaration_style"] == "typescript"
    assert manifest["render"]["profile"] == "kimi-k2.5"
    assert manifest["counts"] == {"rows": len(lines), "rendered": len(lines)}


def test_render_refuses_template_that_ignores_tools(tmp_path, broken_dir):
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    src = tmp_path / "g.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(glaive, 10, seed=1)))
    conv = tmp_path / "c.jsonl"
    assert runner.invoke(app, ["convert", "--format", "glaive", str(src), str(conv)]).exit_code == 0
    result = runner.invoke(
        app,
        [
            "render",
            "--model",
            str(broken_dir),
            "--profile",
            "kimi-k2.5",
            str(conv),
            str(tmp_path / "r.jsonl"),
        ],
    )
    assert result.exit_code == 1
    assert "tools_ignored" in result.output
    assert not (tmp_path / "r.jsonl").exists()
