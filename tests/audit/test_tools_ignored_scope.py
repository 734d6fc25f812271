"""`tools-ignored` judges only rows that carry tools: a chat dataset is not wrong for a model
whose template has no tools (SmolLM2's ChatML), a tool row rendered without its tools is."""

from audit_helpers import write_jsonl

from eyas.audit import AuditOptions, run_audit
from eyas.records import Sample
from eyas.render import Renderer

TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
}


def _samples(renderer, n, dataset, tools=None):
    end = renderer.stop_token_ids()[0]
    out = []
    for i in range(n):
        msgs = [{"role": "user", "content": f"{dataset}: what is {i} plus {i}?"}]
        prompt = renderer.encode(renderer.render_text(msgs))
        answer = [*renderer.encode(f"{i} plus {i} is {2 * i}."), end]
        out.append(
            Sample(
                id=f"{dataset}-{i}",
                dataset=dataset,
                prompt_ids=prompt,
                output_ids=answer,
                finish_reason="stop",
                matched_stop=end,
                messages=msgs,
                tools=tools if tools and i == 0 else [],
                backend="local",
                sampling={"max_new_tokens": 64, "temperature": 0.0},
            )
        )
    return out


def _tools_findings(result):
    return [f for f in result.findings if f.check == "tools-ignored"]


def test_chat_datasets_pass_with_a_template_without_tools(tmp_path, chatml_dir):
    r = Renderer(chatml_dir)
    samples = _samples(r, 12, "b5_ultrachat") + _samples(r, 12, "b6_math")
    result = run_audit(write_jsonl(tmp_path / "s.jsonl", samples), chatml_dir, AuditOptions())
    assert _tools_findings(result) == []
    assert result.verdict == "PASS", [f.to_dict() for f in result.findings]


def test_a_tool_row_with_a_template_without_tools_fails_its_dataset_only(tmp_path, chatml_dir):
    r = Renderer(chatml_dir)
    samples = _samples(r, 12, "b5_ultrachat") + _samples(r, 12, "b1_glaive", tools=[TOOL])
    result = run_audit(write_jsonl(tmp_path / "s.jsonl", samples), chatml_dir, AuditOptions())
    found = _tools_findings(result)
    systemic = [f for f in found if f.systemic]
    assert [(f.reason, f.dataset, f.count) for f in systemic] == [
        ("template_ignores_tools", "b1_glaive", 1)
    ]
    hits = [f for f in found if not f.systemic]
    assert [(f.reason, f.dataset, f.examples) for f in hits] == [
        ("tools_not_declared", "b1_glaive", ["b1_glaive-0"])
    ]
    assert result.verdict == "FAIL"
