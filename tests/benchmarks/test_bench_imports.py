"""Every name the bench scripts and tools import from eyas exists, and every attribute they read
off an imported eyas module is there: a refactor that moves or renames one fails here, in
seconds, instead of in the one slow smoke test that happens to reach that line (CI of stop 41:
`registry.servers`, gone with the engine packages, failed bench_real_quality's smoke run)."""

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "tools").rglob("*.py")])


def _eyas_names(tree: ast.AST) -> tuple[list[tuple[int, str, str]], dict[str, str]]:
    """(line, module, name) of each `from eyas... import name`, and the local names bound to
    eyas modules (by either import form)."""
    imports, modules = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eyas"):
            for alias in node.names:
                imports.append((node.lineno, node.module, alias.name))
                full = f"{node.module}.{alias.name}"
                try:
                    importlib.import_module(full)
                    modules[alias.asname or alias.name] = full
                except ImportError:
                    pass
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("eyas") and alias.asname:
                    modules[alias.asname] = alias.name
    return imports, modules


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_scripts_eyas_names_exist(script):
    tree = ast.parse(script.read_text())
    imports, modules = _eyas_names(tree)
    missing = []
    for line, module, name in imports:
        mod = importlib.import_module(module)
        if not hasattr(mod, name) and f"{module}.{name}" not in modules.values():
            missing.append(f"line {line}: from {module} import {name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and not hasattr(importlib.import_module(modules[node.value.id]), node.attr)
        ):
            missing.append(f"line {node.lineno}: {modules[node.value.id]}.{node.attr}")
    assert not missing, missing
