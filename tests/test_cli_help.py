"""`--help` of every command (walked from the typer app): each flag and argument shows its
config key, required ones say "required", defaults are the schema's, and no internal name
(a sentinel, a Python type, a generated parameter name) leaks."""

import re

import pytest
import typer.main
from pydantic_core import PydanticUndefined
from typer.testing import CliRunner

from eyas.cli import app
from eyas.cli_schema import default_of

INTERNAL = (
    str(PydanticUndefined),
    "PydanticUndefined",
    "flag_",
    "config_file",
    "overrides",
    "list[",
    "NoneType",
    "typing.",
    "Annotated",
    "Literal[",
    "<class",
)


def _commands(group, path=()):
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        if getattr(cmd, "commands", None):
            yield from _commands(cmd, (*path, name))
        else:
            yield (*path, name), cmd


COMMANDS = dict(_commands(typer.main.get_command(app)))


def _help(path) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return re.sub(r"[│╭╮╰╯─]", " ", result.output)


@pytest.mark.parametrize("path", list(COMMANDS), ids=[" ".join(p) for p in COMMANDS])
def test_help_shows_keys_requirements_and_no_internal_names(path):
    text = _help(path)
    for name in INTERNAL:
        assert name not in text, f"{' '.join(path)} --help shows {name!r}"
    assert "--config" in text and "--set" in text
    schema = COMMANDS[path].callback.schema
    for p in schema.params:
        default = default_of(schema.model, p.key)  # the command's own, for shared settings
        assert p.option in text
        if default is PydanticUndefined:
            assert f"[{p.key}; required]" in text, f"{p.option} does not say it is required"
        else:
            shown = "" if default is None or default == [] else f"; default {default}"
            assert f"[{p.key}{shown}]" in text, f"{p.option}: [{p.key}{shown}] not in --help"


def test_shared_server_settings_show_each_commands_own_default():
    """capture and train's streamed capture default to 8 in flight, capture to 4 attempts,
    generate and eval to the shared model's 5 (one ServerConfig, defaults per command)."""
    assert "[server.concurrency; default 8]" in _help(("capture",))
    assert "[server.retry.max_attempts; default 4]" in _help(("capture",))
    assert "[capture_server.concurrency; default 8]" in _help(("train",))
    assert "[backend.retry.max_attempts; default 5]" in _help(("generate",))
    assert "[server.retry.max_attempts; default 5]" in _help(("eval",))


def test_top_level_help_lists_every_command():
    text = _help(())
    for path in COMMANDS:
        assert path[0] in text


def test_the_cli_starts_without_torch_or_transformers():
    """Every `eyas` process (each job of a cluster run, each subprocess test) pays for what the
    CLI imports at start: torch and transformers load only inside the commands that use them."""
    import subprocess
    import sys

    code = "import sys, eyas.cli; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
