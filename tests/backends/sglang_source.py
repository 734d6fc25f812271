"""Run SGLang's own pure-Python functions on CPU, without installing or importing SGLang.

`tools/sglang_src.sh` keeps a few source files of two released wheels under
$EYAS_CACHE/sglang-src/<version>/ (0.5.12.post1 and 0.5.23, sha256-pinned). A file is executed
as it ships, except that its top-level imports of SGLang's own (CUDA-bound) modules are replaced
by stand-ins that refuse to be used (platform probes such as `is_cuda()` answer False, as on
this CPU-only machine): only code that needs none of them can run, and what runs is SGLang's. One stand-in is SGLang-shaped on purpose: `RotaryEmbedding`, the base class whose
`__init__` stores the arguments and calls the subclass's `_compute_cos_sin_cache()`
(`srt/layers/rotary_embedding/base.py` does exactly that, then moves the cache to the device).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ("0.5.12.post1", "0.5.23")
# modules a shipped file may import for real (the rest are SGLang's or GPU libraries)
REAL = ("__future__", "math", "functools", "logging", "typing", "dataclasses", "collections")
REAL += ("numbers", "itertools", "torch", "enum", "re", "os", "copy")


@functools.cache
def source_dir() -> Path:
    out = subprocess.run(
        ["bash", str(ROOT / "tools" / "sglang_src.sh"), sys.executable],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


class _Absent:
    """Stand-in for an SGLang import: usable as a name, refuses to run."""

    def __init__(self, name: str):
        self._name = name

    def __call__(self, *a, **k):
        raise RuntimeError(f"the SGLang test ran into {self._name}, which needs SGLang proper")

    def __getattr__(self, item):
        return _Absent(f"{self._name}.{item}")

    def __mro_entries__(self, bases):  # a class deriving from it still defines
        return (object,)


class RotaryEmbedding(torch.nn.Module):
    """SGLang's `RotaryEmbedding.__init__`, minus the device and kernel selection."""

    def __init__(self, head_size, rotary_dim, max_position_embeddings, base, is_neox_style, dtype):
        super().__init__()
        self.head_size, self.rotary_dim = head_size, rotary_dim
        self.max_position_embeddings, self.base = max_position_embeddings, base
        self.is_neox_style, self.dtype = is_neox_style, dtype
        self.register_buffer("cos_sin_cache", self._compute_cos_sin_cache(), persistent=False)


def load(version: str, relpath: str, **provided) -> types.ModuleType:
    """Execute one shipped file; names in `provided` replace its imports of them."""
    path = source_dir() / version / relpath
    tree = ast.parse(path.read_text())
    module = types.ModuleType(f"sglang_src_{version.replace('.', '_')}_{Path(relpath).stem}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    namespace = module.__dict__
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            name = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if (name or "").split(".")[0] in REAL:
                body.append(node)
                continue
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                # platform probes (`is_cuda`, `is_npu`, ...) answer as on a CPU-only machine
                absent = (lambda *a, **k: False) if name.startswith("is_") else _Absent(name)
                namespace[name] = provided.get(name, absent)
        else:
            body.append(node)
    namespace.update(provided)
    exec(compile(ast.Module(body, []), str(path), "exec"), namespace)
    return module


def method_of(version: str, relpath: str, cls: str, name: str, **provided):
    """One method of one class of a shipped file, as a plain function (`self` first); names in
    `provided` are the module-level names it uses (`re`, `torch`, a loader, a logger)."""
    path = source_dir() / version / relpath
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    namespace: dict = dict(provided)
                    exec("from typing import *", namespace)
                    exec(compile(ast.Module([item], []), str(path), "exec"), namespace)
                    return namespace[name]
    raise LookupError(f"{cls}.{name} not in {path}")


def sglang_get_rope(version: str):
    yarn = load(
        version, "sglang/srt/layers/rotary_embedding/yarn.py", RotaryEmbedding=RotaryEmbedding
    )
    factory = load(
        version,
        "sglang/srt/layers/rotary_embedding/factory.py",
        YaRNScalingRotaryEmbedding=yarn.YaRNScalingRotaryEmbedding,
        RotaryEmbedding=RotaryEmbedding,
        is_hip=lambda: False,
        get_bool_env_var=lambda *a, **k: False,
    )
    return factory.get_rope


def captured(version: str, relpath: str, cls: str, ids, num_layers: int) -> list[int]:
    """What `cls.set_eagle3_layers_to_capture(ids)` of that SGLang version captures (HF)."""
    fn = method_of(version, relpath, cls, "set_eagle3_layers_to_capture")
    model = types.SimpleNamespace()
    target = types.SimpleNamespace(
        pp_group=types.SimpleNamespace(is_last_rank=True),
        config=types.SimpleNamespace(num_hidden_layers=num_layers),
        model=model,
    )
    fn(target, None if ids is None else list(ids))
    return list(model.layers_to_capture)
