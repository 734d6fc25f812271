"""Rendering with the target's own chat template: the probe, the renderer, the `render` stage."""

from eyas.render.probe import TemplateProbeError, probe_template, require_native_tools
from eyas.render.renderer import RenderedPrompt, Renderer, RenderError, last_assistant_index

__all__ = [
    "RenderError",
    "RenderedPrompt",
    "Renderer",
    "TemplateProbeError",
    "last_assistant_index",
    "probe_template",
    "require_native_tools",
]
