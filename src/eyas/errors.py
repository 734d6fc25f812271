"""The error every stage raises for a problem the user must fix: bad input, a wrong path, a
refused template. `reason` is a stable snake_case code (used verbatim in error files and
tallies); the command line prints `error: <detail>` and exits with `exit_code`, never with a
traceback."""

from __future__ import annotations


class EyasError(ValueError):
    exit_code = 2

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class RefusedError(EyasError):
    """The input is readable but eyas refuses it on purpose (a template that ignores tools, a
    fingerprint mismatch, an invalid export): exit code 1, like a failed audit."""

    exit_code = 1


def unreadable(path: object, kind: str, exc: BaseException) -> EyasError:
    """The error for a file that exists but cannot be decoded as `kind` (`parquet`,
    `safetensors`, ...): reason `invalid_<kind>`, the file named, the decoder's first line."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return EyasError(f"invalid_{kind}", f"{path}: not a readable {kind} file ({detail})")
