"""`eyas generate` as the generation tests call it."""

from __future__ import annotations

from typer.testing import CliRunner

from eyas.cli import app

runner = CliRunner()


def generate(args: list[str]):
    return runner.invoke(app, ["generate", *args, "--no-progress"])


def generate_args(model, backend: str, inp, *extra) -> list[str]:
    """The flags every run names (model, backend, input), then `extra` (stringified)."""
    return ["--model", str(model), "--backend", backend, "--input", str(inp), *map(str, extra)]
