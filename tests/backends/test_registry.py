"""One registry of engines: each entry is built in its engine's own package (its name, its
options model, its parts reached by plain imports), the registry names each engine once, and
reading it loads no client. (An engine added by one package plus its registry line:
`test_toy_serving_engine.py`.)"""

import subprocess
import sys
import typing

from typer.testing import CliRunner

from eyas.backends import registry
from eyas.backends.engine import EngineOptions, LaunchOptions
from eyas.cli import app


def generate(model, backend, inp, out):
    args = ["--model", str(model), "--backend", backend, "--input", str(inp), "--out", str(out)]
    return CliRunner().invoke(app, ["generate", *args, "--no-progress"])


def test_every_entry_is_its_engines_own_and_its_parts_import():
    for name, engine in registry.ENGINES.items():
        assert engine.name == name
        assert issubclass(engine.options, EngineOptions)
        # the options model is the one the `engine` table of that kind validates with
        assert typing.get_args(engine.options.model_fields["kind"].annotation) == (name,)
        assert engine.options.__module__.startswith(f"eyas.backends.{name}.")
        backend = engine.backend()
        assert backend.name == name and backend.__module__.startswith(f"eyas.backends.{name}.")
        if engine.server is not None:  # an engine eyas starts takes the launch options
            assert issubclass(engine.options, LaunchOptions)
            assert engine.server().__module__ == f"eyas.backends.{name}.server"
    assert registry.eval_engine_names() == ["local", "sglang", "vllm"]
    assert [n for n in registry.engine_names() if registry.server_class(n)] == ["vllm"]


def test_reading_the_registry_loads_no_client_and_no_torch():
    code = (
        "import sys, eyas.backends.registry as r\n"
        "r.options_model('vllm'); r.eval_engine_names.__doc__\n"
        "print(sorted(m for m in ('aiohttp', 'torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_engines_are_a_config_error(kimi_dir, tmp_path):
    res = generate(kimi_dir, "tgi", tmp_path, tmp_path / "g")
    assert res.exit_code == 2 and "'tgi'" in res.output
    assert all(name in res.output for name in ("sglang", "vllm", "local")), res.output
    assert len([line for line in res.output.splitlines() if line.startswith("error:")]) == 1
