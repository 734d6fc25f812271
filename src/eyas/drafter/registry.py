"""The drafter methods eyas trains, evaluates and exports, by name (`--method`)."""

from __future__ import annotations

from typing import Any

from eyas.drafter.dflash.method import DFlashMethod
from eyas.drafter.dflash2.method import DFlash2Method
from eyas.drafter.eagle3.method import Eagle3Method
from eyas.drafter.method import DrafterLoadError, DraftMethod, LayoutWriter, unsupported_export
from eyas.drafter.peagle.method import PEagleMethod
from eyas.errors import EyasError

METHODS: dict[str, DraftMethod] = {
    "eagle3": Eagle3Method("eagle3", v31=False),
    "eagle3.1": Eagle3Method("eagle3.1", v31=True),
    "dflash": DFlashMethod(),
    "dflash2": DFlash2Method(),
    "peagle": PEagleMethod(),
}

# the export layouts by (method, engine): each method's writers (`DraftMethod.layouts`)
LAYOUTS: dict[tuple[str, str], LayoutWriter] = {
    (name, engine): writer
    for name, method in METHODS.items()
    for engine, writer in method.layouts().items()
}


def layout_writer(method: DraftMethod, engine: str) -> LayoutWriter:
    """The writer of `method`'s layout for `engine`; refused where it has none."""
    writer = LAYOUTS.get((method.name, engine))
    if writer is None:
        raise unsupported_export(method.name, engine, method.layout_refusal(engine))
    return writer


def get_method(name: str) -> DraftMethod:
    if name not in METHODS:
        raise EyasError("bad_flag", f"--method is one of {sorted(METHODS)}, not {name!r}")
    return METHODS[name]


def method_of(model: Any) -> DraftMethod:
    """The method of a drafter model (`model.method`, set by its constructor)."""
    return get_method(model.config.method)


def method_reading(config: dict) -> DraftMethod:
    """The method whose loader reads an exported `config.json`."""
    for method in METHODS.values():
        if method.reads(config):
            return method
    raise DrafterLoadError(
        f"unknown drafter config: architectures={config.get('architectures')}, "
        f"speculators_model_type={config.get('speculators_model_type')}; expected an EAGLE-3 "
        "(LlamaForCausalLMEagle3, speculators eagle3), DFlash (DFlashDraftModel, speculators "
        "dflash) or DFlash2 (DFlash2DraftModel, speculators dflash2) drafter"
    )
