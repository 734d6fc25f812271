"""The base of every options model in eyas: a command's config (`eyas.config`), an engine's
options (`eyas.backends.<engine>`), the client policy's (`eyas.backends.server_config`). It
imports nothing of eyas, so every layer may build on it (docs/architecture.md, "Layers").

- `Strict`: pydantic, unknown keys rejected; `path_keys` name the dotted keys holding paths
  (relative to a config file), `input_keys` the paths a command reads;
- `Choices`: field metadata for a value that is one of the names a registry owns (a model
  format, an engine), checked against the registry when the value is validated;
- `check_urls`: http(s) URLs only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic_core import core_schema


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # dotted keys (`*` for every list item) holding paths relative to a config file
    path_keys: ClassVar[tuple[str, ...]] = ()
    # dotted keys of the paths a command reads: checked to exist before anything is parsed
    input_keys: ClassVar[tuple[str, ...]] = ()


@dataclass(frozen=True)
class Choices:
    """Field metadata: the value is one of the names a registry owns. `names` is called when a
    value is validated and when the command line builds its choices, so the registry's module
    is imported only then and a name added there is valid everywhere at once."""

    names: Callable[[], Iterable[str]]
    what: str
    # a registry's own check, for a message that says more than "unknown" (raises ValueError)
    check: Callable[[Any], Any] | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def _check(self, value: Any) -> Any:
        if value is not None and self.check is not None:
            return self.check(value)
        if value is not None and value not in (names := list(self.names())):
            raise ValueError(f"unknown {self.what} {value!r}; choose one of {names}")
        return value


def check_urls(urls: list[str]) -> list[str]:
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"{url!r} is not an http(s) URL")
    return urls


__all__ = ["Choices", "Strict", "check_urls"]
