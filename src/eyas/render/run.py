"""`eyas render`: canonical conversations to prompt ids, after probing the template."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from eyas import __version__
from eyas.jsonl import read_jsonl, require_file, write_json
from eyas.records import SCHEMA_VERSION, Conversation, RecordError
from eyas.render.probe import TOOLS_IGNORED, probe_template, require_native_tools
from eyas.render.renderer import Renderer, RenderError


@dataclass
class RenderResult:
    num_rendered: int = 0
    reasons: Counter = field(default_factory=Counter)
    probe: dict[str, Any] = field(default_factory=dict)
    manifest_path: Path | None = None


def _sidecar(out: Path, suffix: str) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + suffix)


def render_row(renderer: Renderer, row: dict, *, tools_ignored: bool) -> dict:
    """One convert-output row plus `prompt_ids`, `prompt_text`, `turn` (raises RenderError or
    RecordError with the row's reason). `tools_ignored`: the template does not render tools,
    so a row that carries tools is rejected (`tools_ignored`) instead of rendered blind."""
    conv = Conversation.from_dict(row)
    if tools_ignored and conv.tools:
        raise RenderError("tools_ignored", TOOLS_IGNORED)
    rendered = renderer.render_conversation(conv)
    out = {
        **row,
        "prompt_ids": rendered.prompt_ids,
        "prompt_text": rendered.prompt_text,
        "turn": rendered.turn,
    }
    if rendered.notes:
        out["notes"] = [*row.get("notes", []), *rendered.notes]
    return out


def render_file(renderer: Renderer, in_path: str | Path, out_path: str | Path) -> RenderResult:
    """Render each line of a convert output; add `prompt_ids`, `prompt_text`, `turn`.

    A template that ignores tools cannot render a row that carries tools: such rows are
    rejected (`tools_ignored`) and counted, the others render. Raises TemplateProbeError before
    writing anything when every row carries tools and the template ignores them, or when
    rows carry tools and the template declares them in a form the profile does not expect.
    """
    in_path, out_path = Path(in_path), Path(out_path)
    require_file(in_path, "JSONL file (the output of eyas convert)")
    result = RenderResult(probe=probe_template(renderer))
    rows = list(read_jsonl(in_path))
    with_tools = sum(1 for row in rows if row.get("tools"))
    tools_ignored = not result.probe["tools_rendered"]
    if with_tools and (with_tools == len(rows) or not tools_ignored):
        require_native_tools(result.probe, renderer)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("wb") as out, _sidecar(out_path, ".errors.jsonl").open("wb") as err:
        for index, row in enumerate(rows):
            try:
                rendered = render_row(renderer, row, tools_ignored=tools_ignored)
            except (RenderError, RecordError) as exc:
                result.reasons[exc.reason] += 1
                err.write(
                    orjson.dumps(
                        {
                            "row": index,
                            "id": row.get("id"),
                            "reason": exc.reason,
                            "detail": exc.detail,
                        }
                    )
                    + b"\n"
                )
                continue
            out.write(orjson.dumps(rendered) + b"\n")
            result.num_rendered += 1
    result.manifest_path = _sidecar(out_path, ".manifest.json")
    write_json(
        result.manifest_path,
        {
            "stage": "render",
            "eyas_version": __version__,
            "schema_version": SCHEMA_VERSION,
            "input": str(in_path),
            "render": renderer.describe(),
            "probe": result.probe,
            "counts": {"rows": len(rows), "rendered": result.num_rendered},
            "reasons": dict(result.reasons),
        },
    )
    return result
