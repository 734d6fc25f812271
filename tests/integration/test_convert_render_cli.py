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


def _glaive_conversations(tmp_path):
    glaive = next(f for f in FAMILIES if f.name == "b1_glaive")
    src = tmp_path / "g.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in family_rows(glaive, 10, seed=1)))
    conv = tmp_path / "c.jsonl"
    assert runner.invoke(app, ["convert", "--format", "glaive", str(src), str(conv)]).exit_code == 0
    return [json.loads(line) for line in conv.read_text().splitlines()]


def _render(model, conv, out):
    args = ["render", "--model", str(model), "--profile", "kimi-k2.5", str(conv), str(out)]
    return runner.invoke(app, args)


def test_render_refuses_a_tool_dataset_when_the_template_ignores_tools(tmp_path, broken_dir):
    rows = [r for r in _glaive_conversations(tmp_path) if r["tools"]]
    conv = tmp_path / "tools.jsonl"
    conv.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = _render(broken_dir, conv, tmp_path / "r.jsonl")
    assert result.exit_code == 1
    assert "tools_ignored" in result.output
    assert not (tmp_path / "r.jsonl").exists()


def test_render_of_a_mixed_dataset_rejects_only_the_tool_rows(tmp_path, broken_dir):
    rows = _glaive_conversations(tmp_path)
    with_tools = [r["id"] for r in rows if r["tools"]]
    assert 0 < len(with_tools) < len(rows)
    conv = tmp_path / "mixed.jsonl"
    conv.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = _render(broken_dir, conv, tmp_path / "r.jsonl")
    assert result.exit_code == 0, result.output
    rendered = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    errors = [json.loads(line) for line in (tmp_path / "r.errors.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rendered] == [r["id"] for r in rows if not r["tools"]]
    assert sorted(e["id"] for e in errors) == sorted(with_tools)
    assert {e["reason"] for e in errors} == {"tools_ignored"}
    manifest = json.loads((tmp_path / "r.manifest.json").read_text())
    assert manifest["reasons"] == {"tools_ignored": len(with_tools)}
    assert manifest["counts"] == {"rows": len(rows), "rendered": len(rows) - len(with_tools)}
