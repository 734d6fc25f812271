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
from eyas.render.probe import probe_template, require_native_tools
from eyas.render.renderer import Renderer, RenderError


@dataclass
class RenderResult:
    num_rendered: int = 0
    reasons: Counter = field(default_factory=Counter)
    probe: dict[str, Any] = field(default_factory=dict)
    manifest_path: Path | None = None


def _sidecar(out: Path, suffix: str) -> Path:
    return out.with_name(out.name.removesuffix(".jsonl") + suffix)


def render_file(renderer: Renderer, in_path: str | Path, out_path: str | Path) -> RenderResult:
    """Render each line of a convert output; add `prompt_ids`, `prompt_text`, `turn`.

    Raises TemplateProbeError before writing anything when conversations carry tools and the
    template ignores them (or declares them in a form the profile does not expect).
    """
    in_path, out_path = Path(in_path), Path(out_path)
    require_file(in_path, "JSONL file (the output of eyas convert)")
    result = RenderResult(probe=probe_template(renderer))
    rows = list(read_jsonl(in_path))
    if any(row.get("tools") for row in rows):
        require_native_tools(result.probe, renderer)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with out_path.open("wb") as out, _sidecar(out_path, ".errors.jsonl").open("wb") as err:
        for index, row in enumerate(rows):
            try:
                conv = Conversation.from_dict(row)
                rendered = renderer.render_conversation(conv)
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
            row = {
                **row,
                "prompt_ids": rendered.prompt_ids,
                "prompt_text": rendered.prompt_text,
                "turn": rendered.turn,
            }
            if rendered.notes:
                row["notes"] = [*row.get("notes", []), *rendered.notes]
            out.write(orjson.dumps(row) + b"\n")
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
