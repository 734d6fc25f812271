"""Clean and deliberately broken sample sets for the audit.

The clean set is what a perfect K2.5-style target would produce on the toy datasets: prompts
rendered natively, outputs = the reference completion tokens. Each broken set plants one bug.
"""

from __future__ import annotations

import pytest
from audit_helpers import make_sample

from eyas.render import Renderer
from eyas.sources import convert_rows
from eyas.toy.datasets import FAMILIES, family_rows


@pytest.fixture(scope="session")
def kimi_renderer(kimi_dir):
    return Renderer(kimi_dir)


@pytest.fixture(scope="session")
def toy_conversations():
    convs = []
    for fam in FAMILIES:
        convs += [
            c
            for c in convert_rows(family_rows(fam, 12, seed=31), fam.format, fam.name)
            if hasattr(c, "messages")
        ]
    return convs


@pytest.fixture(scope="session")
def clean_samples(kimi_renderer, toy_conversations):
    return [make_sample(kimi_renderer, c) for c in toy_conversations]
