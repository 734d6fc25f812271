"""Structural rules: imports run down the layers of docs/architecture.md and never in a circle;
engines are named only in eyas.backends; family knowledge only in eyas.formats; shards by
sha256 that hold across processes; flags generated from the config schema, overriding their
keys."""

import ast
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eyas.config import build_config
from eyas.errors import EyasError
from eyas.formats import MODEL_FORMATS
from eyas.generate.config import GenerateConfig, PipelineConfig
from eyas.jobs import shard_of
from eyas.train.config import TrainConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "eyas"
ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


# -- imports: down the layers, no circle ---------------------------------------------------------


def modules(src: Path) -> dict[str, Path]:
    """Every module of the package at `src` by dotted name (a package by its own name)."""
    out = {}
    for path in src.rglob("*.py"):
        parts = [src.name, *path.relative_to(src).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(src: Path) -> dict[str, dict[str, int]]:
    """module -> {module of the package it imports: line}: every import statement, at the top,
    in a function or under TYPE_CHECKING; `from a import b` names module `a.b` when it is one."""
    mods = modules(src)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names
                ]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == src.name and (hit := known(target)) and hit != name:
                    found.setdefault(hit, node.lineno)
        graph[name] = found
    return graph


def read_layers(doc: Path) -> dict[str, int]:
    """The module prefixes of the doc's "Layers" table, each with its layer number."""
    section = doc.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers = {}
    for line in section.splitlines():
        if m := re.match(r"\|\s*(\d+)\s*\|([^|]*)\|", line):
            for prefix in re.findall(r"`([\w.]+)`", m.group(2)):
                layers[prefix] = int(m.group(1))
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of the longest listed prefix (the bare package name only for itself)."""
    best = None
    for prefix, layer in layers.items():
        nested = "." in prefix and module.startswith(prefix + ".")
        if (module == prefix or nested) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer)
    return best[1] if best else None


def upward(graph: dict[str, dict[str, int]], layers: dict[str, int]) -> list[str]:
    return [
        f"{a} (layer {layer_of(a, layers)}) imports {b} (layer {layer_of(b, layers)}), line {n}"
        for a, targets in sorted(graph.items())
        for b, n in sorted(targets.items())
        if layer_of(b, layers) > layer_of(a, layers)
    ]


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer_and_none_imports_upward():
    layers = read_layers(ARCHITECTURE)
    graph = imports(SRC)
    assert [m for m in graph if layer_of(m, layers) is None] == []
    assert upward(graph, layers) == []


def test_no_import_circle():
    assert circles(imports(SRC)) == []


def test_the_import_rules_catch_what_they_forbid(tmp_path):
    """The readers above on a package with one upward import (a lazy one, in a function) and one
    circle (a relative import and one under TYPE_CHECKING)."""
    pkg = tmp_path / "pkg"
    for rel, text in {
        "__init__.py": "",
        "low.py": "def f():\n    from pkg.high import g\n",
        "high.py": "from pkg import a\n",
        "a/__init__.py": "",
        "a/x.py": "from .y import z\n",
        "a/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a.x import q\n",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    layers = {"pkg": 1, "pkg.low": 1, "pkg.a": 1, "pkg.high": 2}
    graph = imports(pkg)
    assert upward(graph, layers) == ["pkg.low (layer 1) imports pkg.high (layer 2), line 2"]
    assert circles(graph) == [["pkg.a.x", "pkg.a.y"]]
    assert layer_of("pkg.a.x", layers) == 1 and layer_of("pkgx", layers) is None


# -- engines are named in eyas.backends only -----------------------------------------------------

# The export layouts name the engine they are for (docs/architecture.md, "Layers"): each method
# registers a writer per engine (`DraftMethod.layouts`), and export checks layouts across
# engines: these files, and these names in these files.
LAYOUTS = ("export/*.py", "drafter/*method.py", "drafter/*/method.py", "drafter/*/export*.py")
LAYOUT_FILES = {"drafter/rope.py"}  # each engine's reading of a YaRN config
NAMES_ALLOWED = {
    "evaluate/result.py": {"sglang_accept_length"},  # SGLang's own figure, under its name
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the nodes that are docstrings (prose, like comments)."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            out.add(id(value))
    return out


def engine_names_in(
    text: str, engines: list[str], exact: list[str] | None = None
) -> list[tuple[int, str]]:
    """(line, what) for each place the code names an engine: an identifier with the name as a
    word, a string that is exactly the name (`exact`, when `engines` are patterns), an import
    of the engine's package."""
    word = re.compile(rf"(?:^|_)({'|'.join(engines)})(?:_|$)", re.I)
    engines = exact or engines
    tree = ast.parse(text)
    prose = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            if node.value.lower() in engines:
                names.append(repr(node.value))
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            names.append(node.arg)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            names += [p for m in modules for p in m.split(".")]
            names += [a.asname for a in node.names if a.asname]
        for name in names:
            if name.startswith("'") or word.search(name):
                found.append((node.lineno, name))
    return sorted(set(found))


def _served_engines() -> list[str]:
    from eyas.backends import registry

    return [n for n in registry.engine_names() if registry.backend_class(n).remote]


def test_no_code_outside_the_engine_layer_names_an_engine():
    engines = _served_engines()
    assert {"vllm", "sglang", "openai_chat"} <= set(engines)
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.split("/")[0] in ("backends", "testing") or rel in LAYOUT_FILES:
            continue
        if any(fnmatch.fnmatch(rel, pattern) for pattern in LAYOUTS):
            continue
        allowed = NAMES_ALLOWED.get(rel, set())
        for line, name in engine_names_in(path.read_text(), engines):
            if name not in allowed:
                offenders.append(f"{rel}:{line}: {name}")
    assert offenders == []


def test_the_engine_name_rule_catches_code_and_spares_prose():
    code = (
        '"""Serves vllm."""\n'
        "import eyas.backends.vllm.client\n"
        "def start(vllm_python, backend):\n"
        '    """Start vllm."""\n'
        '    if backend == "sglang":  # vllm in a comment\n'
        '        raise ValueError("start sglang yourself")\n'
        "    return cfg.vllm_endpoint\n"
    )
    found = engine_names_in(code, ["vllm", "sglang"])
    assert found == [(2, "vllm"), (3, "vllm_python"), (5, "'sglang'"), (7, "vllm_endpoint")]


# -- drafter methods are named in eyas.drafter only ----------------------------------------------

# Each engine's conventions name the method layouts it reads (architectures, speculators types,
# its own functions), pinned to the engine's code; the validator checks those layouts across
# engines until export layouts are registered per (method, engine).
METHOD_LAYOUT_FILES = {
    "backends/sglang/conventions.py",
    "backends/vllm/conventions.py",
    "backends/vllm/loader_probe.py",
    "export/validate.py",
}


def method_names_in(text: str, methods: list[str]) -> list[tuple[int, str]]:
    """(line, what) for each place the code names a drafter method, by the engine rule's
    reading (`engine_names_in`): an identifier with the name as a word, a string that is
    exactly the name, an import of the method's package."""
    return engine_names_in(text, [re.escape(m) for m in methods], exact=methods)


def test_no_code_outside_the_drafter_layer_names_a_method():
    from eyas.drafter.registry import METHODS

    methods = sorted(METHODS)
    assert {"eagle3", "eagle3.1", "dflash", "dflash2", "peagle"} <= set(methods)
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.split("/")[0] in ("drafter", "testing") or rel in METHOD_LAYOUT_FILES:
            continue
        for line, name in method_names_in(path.read_text(), methods):
            offenders.append(f"{rel}:{line}: {name}")
    assert offenders == []


def test_the_method_name_rule_catches_code_and_spares_prose():
    code = (
        '"""Trains eagle3."""\n'
        "from eyas.drafter.dflash.method import DFlashMethod\n"
        "def budget(cfg, eagle3_flops):\n"
        '    """For eagle3.1 drafters."""\n'
        '    if cfg.method.startswith("eagle3"):  # dflash in a comment\n'
        '        raise ValueError("train eagle3.1 instead")\n'
        '    return cfg.method == "eagle3.1" or cfg.peagle_mask_token_id\n'
    )
    found = method_names_in(code, ["eagle3", "eagle3.1", "dflash", "peagle"])
    assert found == [
        (2, "dflash"),
        (3, "eagle3_flops"),
        (5, "'eagle3'"),
        (7, "'eagle3.1'"),
        (7, "peagle_mask_token_id"),
    ]


def engine_comparisons_in(text: str, engines: list[str]) -> list[tuple[int, str]]:
    """(line, name) for each comparison with a string that is exactly an engine's name."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                elts = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
                for e in elts:
                    if isinstance(e, ast.Constant) and str(e.value).lower() in engines:
                        found.append((node.lineno, repr(e.value)))
    return sorted(set(found))


def test_no_drafter_method_branches_on_an_engine_name():
    """Export layouts are registered per (method, engine): a method names an engine as a key
    of its `layouts`, and no drafter code compares anything with an engine's name."""
    from eyas.drafter.registry import LAYOUTS, METHODS

    engines = _served_engines()
    offenders = [
        f"{path.relative_to(SRC)}:{line}: {name}"
        for path in sorted((SRC / "drafter").rglob("*.py"))
        for line, name in engine_comparisons_in(path.read_text(), engines)
    ]
    assert offenders == []
    assert {engine for _, engine in LAYOUTS} <= set(engines)
    assert {method for method, _ in LAYOUTS} == set(METHODS)  # every method exports somewhere
    code = 'if fmt == "sglang" or engine in ("vllm", "x"):\n    pass\n'
    assert engine_comparisons_in(code, ["vllm", "sglang"]) == [(1, "'sglang'"), (1, "'vllm'")]


def test_no_module_is_loaded_from_a_string():
    """Registries import what they list (an IDE and a reader follow them): no
    `importlib.import_module` / `__import__`, no `"module:Class"` spec."""
    spec = re.compile(r"^eyas(\.\w+)+:\w+$")
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "import_module":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: import_module")
            elif isinstance(node, ast.Name) and node.id == "__import__":
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: __import__")
            elif isinstance(node, ast.Constant) and spec.match(str(node.value)):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: {node.value}")
    assert offenders == []


# -- family knowledge ---------------------------------------------------------------------------


def test_no_module_outside_formats_branches_on_a_family_name():
    names = "|".join(re.escape(n) for n in MODEL_FORMATS if n != "generic")
    branch = re.compile(
        rf"""(==|!=|startswith\(|in\s*\()\s*["']({names}|kimi|qwen|glm)|["']({names})["']\s*(==|!=)"""
    )
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "formats":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if branch.search(line):
                offenders.append(f"{rel}:{n}: {line.strip()}")
    assert offenders == []


SHARD_SCRIPT = """
import sys
from eyas.jobs import shard_of
ids = [f"{k:032x}" for k in range(0, 4000, 7)] + [f"sample-{k}" for k in range(300)]
print(",".join(str(shard_of(i, 5)) for i in ids))
"""


def test_sha256_shards_cover_everything_once_in_any_process():
    ids = [f"{k:032x}" for k in range(0, 4000, 7)] + [f"sample-{k}" for k in range(300)]
    shards = [{i for i in ids if shard_of(i, 5) == s} for s in range(5)]
    assert set().union(*shards) == set(ids)  # the union is everything
    assert sum(len(s) for s in shards) == len(ids)  # and the shards are disjoint
    assert all(len(s) > len(ids) / 10 for s in shards)  # roughly even
    runs = set()
    for seed in ("0", "1", "12345"):
        out = subprocess.run(
            [sys.executable, "-c", SHARD_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
        ).stdout.strip()
        runs.add(out)
    assert len(runs) == 1  # the same assignment whatever Python's hash seed
    assert runs.pop() == ",".join(str(shard_of(i, 5)) for i in ids)


def test_flags_override_the_file_and_defaults_live_in_the_schema(tmp_path):
    (tmp_path / "p.toml").write_text(
        '[model]\ndir = "m"\n[backend]\nkind = "sglang"\nurls = ["http://a:1"]\nconcurrency = 8\n'
    )
    cfg = build_config(
        PipelineConfig,
        tmp_path / "p.toml",
        {"backend.concurrency": 32, "engine.batch_size": 4, "generate.out": Path("out")},
        ["backend.timeout_s=9"],
    )
    assert cfg.backend.concurrency == 32 and cfg.engine.batch_size == 4  # flags win
    assert cfg.backend.timeout_s == 9 and cfg.model.dir == tmp_path / "m"
    assert cfg.generate_out == Path("out")  # a flag's relative path: the working directory
    assert cfg.generate.max_new_tokens == GenerateConfig.model_fields["max_new_tokens"].default
    with pytest.raises(EyasError, match="conflicts"):
        build_config(
            PipelineConfig,
            tmp_path / "p.toml",
            {"backend.concurrency": 32},
            ["backend.concurrency=16"],
        )
    with pytest.raises(Exception, match="timeout_z"):
        build_config(PipelineConfig, tmp_path / "p.toml", None, ["backend.timeout_z=9"])


def test_cli_defaults_come_from_the_schema():
    from typer.testing import CliRunner

    from eyas.cli import app

    text = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "300"}).output
    default_ttt = TrainConfig.model_fields["ttt"].default
    assert f"[ttt; default {default_ttt}]" in text
    generate = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "300"}).output
    from eyas.backends.sglang.options import SGLangOptions

    batch = SGLangOptions.model_fields["batch_size"].default  # an engine's own option
    assert f"[engine.batch_size; default {batch}]" in generate and "--url" in generate
