"""The old config keys and flags eyas still reads, in one place: each is moved to its new key
before a config is validated, and each one read gives one `DeprecatedKey` warning (the command
line prints it as one `deprecated:` line). They are read until `UNTIL`.

A config written by an older eyas wrote every key, so an old key holding its old default is
not a mistake even where the new config has nothing for it; giving an old key and its new one
with two values is (which one should win?).
"""

from __future__ import annotations

import warnings
from typing import Any

UNTIL = "0.3"  # the release that stops reading the old keys and flags


class DeprecatedKey(FutureWarning):
    """An old config key or flag was read (FutureWarning: shown to users by default)."""


def deprecated(old: str, new: str, what: str = "key") -> None:
    """Warn once that `old` (a key or a flag) was read as `new`."""
    warnings.warn(
        f"{old} is now {new}; the old {what} is read until {UNTIL}", DeprecatedKey, stacklevel=3
    )


# -- keys renamed in place: old -> (new, value translation) ---------------------------------------

# `include_truncated` (bool, default false: cut outputs skipped) became `truncated` (train|skip,
# default train); old configs wrote every key, so false is the old default, skip
_INCLUDE_TRUNCATED = ("truncated", {True: "train", False: "skip"}, "truncated (train|skip)")
RENAMED: dict[str, dict[str, tuple[str, dict[Any, Any] | None, str]]] = {
    "train": {"include_truncated": _INCLUDE_TRUNCATED},
    "capture": {"include_truncated": _INCLUDE_TRUNCATED},
    "export samples": {"include_truncated": _INCLUDE_TRUNCATED},
    # `eyas export check --vllm-python` became `--engine-python`
    "export check": {"vllm_python": ("engine_python", None, "engine_python")},
}

# -- keys of configs written before the server settings had one home -----------------------------
# (command -> (its ServerConfig's key, {old -> new under it})); see docs/cluster-servers.md
SERVER_KEYS: dict[str, tuple[str, dict[str, str]]] = {
    "train": ("capture_server", {"capture_urls": "urls", "capture_concurrency": "concurrency"}),
    "capture": (
        "server",
        {
            **{k: k for k in ("urls", "url_file", "url_file_s", "concurrency")},
            **{k: k for k in ("adaptive_concurrency", "timeout_s", "ready_timeout_s")},
            **{k: f"retry.{k}" for k in ("max_attempts", "backoff_s", "max_consecutive_failures")},
        },
    ),
    "eval": ("server", {k: k for k in ("urls", "url_file", "url_file_s", "timeout_s", "retry")}),
}

# -- keys of configs written before each engine owned its options ---------------------------------
# (command -> {old dotted key -> (the engine's option, its old default)})
_START = {"vllm_python": ("python", None)}  # capture and eval: `--vllm-python`
ENGINE_KEYS: dict[str, dict[str, tuple[str, Any]]] = {
    "generate": {
        "backend.batch_size": ("batch_size", 1),
        "backend.vllm_endpoint": ("endpoint", "completions"),
        "backend.served_model": ("served_model", None),
    },
    "capture": _START,
    "eval": _START,
}


def renamed_keys(data: Any, command: str) -> Any:
    """`data` with each old top-level key of `command` renamed (and its value translated)."""
    if not isinstance(data, dict):
        return data
    for old, (new, values, shown) in RENAMED.get(command, {}).items():
        if old not in data:
            continue
        data = dict(data)
        value = data.pop(old)
        deprecated(old, shown)
        if values is not None:
            if value not in values:
                raise ValueError(f"{command}: {old} takes {' or '.join(map(str, values))}")
            value = values[value]
        if data.get(new) is not None and data[new] != value:
            raise ValueError(f"{command}: {old} is the old name of {new}: give one")
        data[new] = value
    return data


def server_keys(data: dict[str, Any], command: str) -> dict[str, Any]:
    """`data` with each old key of `command`'s server settings moved under its ServerConfig's
    key (a table there, or left alone when that is a ServerConfig already built)."""
    if command not in SERVER_KEYS:
        return data
    where, moved = SERVER_KEYS[command]
    server = data.get(where)
    if not any(old in data for old in moved) or not (server is None or isinstance(server, dict)):
        return data
    data = dict(data)
    server = dict(server or {})
    for old, new in moved.items():
        if old not in data:
            continue
        deprecated(old, f"{where}.{new}")
        _place(server, new, data.pop(old), f"{command}: {old} is the old name of {where}.{new}")
    data[where] = server
    return data


def _place(root: dict[str, Any], dotted: str, value: Any, conflict: str) -> None:
    """Put `value` at the dotted key under `root`, making the tables on the way (a built model
    there read as the fields it was given). A table merges with the table there; a value that
    differs from the one there raises ValueError(`conflict`: the old and new key given twice)."""
    *parents, leaf = dotted.split(".")
    node = root
    for part in parents:
        child = node.get(part)
        if child is not None and not isinstance(child, dict):
            child = child.model_dump(exclude_unset=True)
        node[part] = dict(child or {})
        node = node[part]
    there = node.get(leaf)
    if isinstance(value, dict) and isinstance(there, dict):
        if any(k in value and value[k] != v for k, v in there.items()):
            raise ValueError(f"{conflict}: give one")
        value = {**there, **value}
    elif leaf in node and there != value:
        raise ValueError(f"{conflict}: give one")
    node[leaf] = value


def engine_keys(
    data: dict[str, Any], engine: dict[str, Any], fields: Any, command: str
) -> dict[str, Any]:
    """`data` with each old key of `command` that an engine's options now hold moved into
    `engine` (the raw `engine` table, changed in place); `fields`: the options the engine has.
    An old key the engine has no option for is dropped at its old default, refused otherwise."""
    kind = engine.get("kind")
    for old, (option, default) in ENGINE_KEYS.get(command, {}).items():
        *parents, leaf = old.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node:
            continue
        node = dict(node)
        value = node.pop(leaf)
        deprecated(old, f"engine.{option}")
        if parents:
            data[parents[0]] = node  # (old keys sit at most one table deep)
        else:
            data = {k: v for k, v in data.items() if k != leaf}
        if option not in fields:
            if value == default:
                continue
            raise ValueError(f"{command}: {old} is not an option of engine {kind!r}")
        if option in engine and engine[option] != value:
            raise ValueError(f"{command}: {old} is the old name of engine.{option}: give one")
        engine[option] = value
    return data


def moved_keys(data: Any, command: str, moved: dict[str, str]) -> Any:
    """`data` with each old top-level key of `moved` put at its dotted key now (a table made
    where missing; an option owner lists its own, as `eyas.drafter.options.OLD_KEYS`)."""
    if not isinstance(data, dict) or not any(old in data for old in moved):
        return data
    data = dict(data)
    for old, new in moved.items():
        if old not in data:
            continue
        deprecated(old, new)
        _place(data, new, data.pop(old), f"{command}: {old} is the old name of {new}")
    return data
