"""Rendering with the target's own chat template: profiles, probe, normalisation."""

from eyas.render.probe import TemplateProbeError, probe_template, require_native_tools
from eyas.render.profiles import PROFILES, Profile, ProfileError, detect_profile, get_profile
from eyas.render.renderer import RenderedPrompt, Renderer, RenderError, last_assistant_index

__all__ = [
    "PROFILES",
    "Profile",
    "ProfileError",
    "RenderError",
    "RenderedPrompt",
    "Renderer",
    "TemplateProbeError",
    "detect_profile",
    "get_profile",
    "last_assistant_index",
    "probe_template",
    "require_native_tools",
]
