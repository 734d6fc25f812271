"""Export layouts are registered per (method, engine): each method's writers
(`DraftMethod.layouts`), gathered in `eyas.drafter.registry.LAYOUTS`; a pair without a writer is
refused with the method's reason."""

import pytest

from eyas.drafter.registry import LAYOUTS, get_method, layout_writer
from eyas.errors import RefusedError


def test_every_method_registers_the_layouts_it_writes():
    assert set(LAYOUTS) == {
        *((m, e) for m in ("eagle3", "eagle3.1", "dflash", "dflash2") for e in ("sglang", "vllm")),
        ("peagle", "vllm"),  # SGLang serves no P-EAGLE drafter
    }
    dflash, dflash2 = get_method("dflash"), get_method("dflash2")
    # DFlash2 inherits DFlash's hooks but writes its own layouts
    assert layout_writer(dflash2, "vllm") != layout_writer(dflash, "vllm")
    assert layout_writer(dflash2, "vllm").__func__ is type(dflash2)._speculators_layout


def test_a_pair_without_a_layout_is_refused_with_the_methods_reason():
    with pytest.raises(RefusedError) as err:
        layout_writer(get_method("peagle"), "sglang")
    assert err.value.reason == "export_unsupported" and "SGLang 0.5.23" in err.value.detail
    with pytest.raises(RefusedError) as err:
        layout_writer(get_method("dflash"), "openai_chat")
    assert "sglang, vllm only" in err.value.detail
