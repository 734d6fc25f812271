"""Helpers to build clean and broken audit samples (imported by the audit tests)."""

from __future__ import annotations

import json

from eyas.records import Sample
from eyas.toy.samples import reference_sample


def make_sample(renderer, conv, messages=None, tools=None, **overrides) -> Sample:
    s = reference_sample(renderer, conv, messages, tools)
    for k, v in overrides.items():
        setattr(s, k, v)
    return s


def write_jsonl(path, samples):
    path.write_text("\n".join(json.dumps(s.to_dict()) for s in samples) + "\n")
    return path


def glaive_tool_convs(convs):
    return [c for c in convs if c.dataset == "b1_glaive" and c.tools]
