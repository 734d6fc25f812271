"""Why a request failed: one table of stable reason codes, each transient or permanent.

Every stage (generate, capture, streamed capture, served evaluation) sees failures through
`BackendError`, whose `retryable` comes from this table and nowhere else, so the same server
fault gets the same reason and the same treatment everywhere. The circuit breaker counts
requests that exhausted their retries on transient reasons (the server, not the data, is in
trouble); the adaptive in-flight limit halves on the `overload` ones.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class Reason:
    retryable: bool
    overload: bool  # the server is alive but asks for less (the in-flight limit halves)
    means: str


REASONS: dict[str, Reason] = {
    # transient: the same request may succeed later
    "timeout": Reason(True, False, "no progress from the server for timeout_s"),
    "connection_error": Reason(True, False, "refused, reset or dropped connection"),
    "server_error": Reason(True, False, "HTTP 5xx, or an abort the engine marks 5xx"),
    "server_timeout": Reason(True, True, "HTTP 408"),
    "rate_limited": Reason(True, True, "HTTP 429"),
    "server_abort": Reason(True, False, "the engine aborted the request, no status"),
    "malformed_response": Reason(True, False, "a 200 whose body is not the schema"),
    "hidden_states_torn": Reason(True, False, "a capture file read while incomplete"),
    "hidden_states_unreadable": Reason(True, False, "a capture file could not be read"),
    # permanent: retrying the same request cannot help
    "bad_request": Reason(False, False, "HTTP 400, or an abort the engine marks 400"),
    "http_error": Reason(False, False, "another HTTP 4xx"),
    "prompt_mismatch": Reason(False, False, "the server saw other ids than were sent"),
    "no_hidden_states": Reason(False, False, "the server wrote no capture file"),
    "local_error": Reason(False, False, "in-process generation raised"),
    "local_out_of_memory": Reason(False, False, "out of memory at batch size 1"),
    "server_not_ready": Reason(False, False, "the server never became ready"),
    "not_sent": Reason(False, False, "the run stopped (breaker, interrupt) before it was sent"),
}


class BackendError(Exception):
    """A failed request. `reason` is a stable snake_case code of REASONS; whether it is
    retried is the table's answer, never the raiser's."""

    def __init__(self, reason: str, detail: str, status: int | None = None):
        if reason not in REASONS:
            raise ValueError(f"unknown failure reason {reason!r}: add it to REASONS")
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.status = status

    @property
    def retryable(self) -> bool:
        return REASONS[self.reason].retryable

    @property
    def overload(self) -> bool:
        return REASONS[self.reason].overload


def status_reason(status: int) -> str:
    """The reason code of an HTTP status (also of an engine abort that names one)."""
    if status == 408:
        return "server_timeout"
    if status == 429:
        return "rate_limited"
    if status >= 500:
        return "server_error"
    if status == 400:
        return "bad_request"
    return "http_error"


def http_error(status: int, body: bytes) -> BackendError:
    return BackendError(status_reason(status), body[:300].decode("utf-8", "replace"), status)


def transport_error(exc: BaseException) -> BackendError:
    if isinstance(exc, asyncio.TimeoutError):
        return BackendError("timeout", "no answer within the connect timeout")
    return BackendError("connection_error", f"{type(exc).__name__}: {exc}")


TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError)
