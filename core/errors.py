"""Every error this program raises on purpose, under one root that carries its exit code.

The CLI catches :class:`LLMCompareError` once and exits with ``exit_code``: 2 bad input (one line
naming the problem and the fix, no traceback), 1 a run or start-up that failed, 130 interrupted.
A request that fails does not end the run: it raises :class:`BackendRequestError` with one of the
enumerated :class:`FailureKind` values, which the runner records per request.
"""
from __future__ import annotations

from enum import StrEnum


class LLMCompareError(Exception):
    """Root of the program's own errors; ``exit_code`` is what ``compare`` exits with."""

    exit_code = 1


class UserError(LLMCompareError):
    """Bad input: the message is one line naming the problem and the fix."""

    exit_code = 2


class RunFailed(LLMCompareError):
    """A run that measured something but did not complete (results are kept)."""

    exit_code = 1


class Interrupted(LLMCompareError):
    """The user (or a signal) stopped the run; what was measured is kept."""

    exit_code = 130


class BackendStartError(LLMCompareError):
    """The engine/server could not be started; message is one line naming cause and fix."""

    exit_code = 1


class FailureKind(StrEnum):
    """Why one request failed (``RequestRecord.error_kind``; stored as its string value)."""

    CONNECT = "connect"  # no connection to the server
    DISCONNECTED = "disconnected"  # the connection closed before the stream ended
    READ = "read"  # reading the response failed
    TIMEOUT = "timeout"  # no completion within --timeout
    PROTOCOL = "protocol"  # a malformed response or stream event
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    VALIDATION = "validation"  # the server rejected the request's parameters (HTTP 422)
    OVERLOADED = "overloaded"  # the server refused load (HTTP 429, TGI "overloaded")
    GENERATION = "generation"  # the server failed while generating (TGI "generation", HTTP 424)
    PROMPT = "prompt"  # the backend cannot take this prompt form
    ENGINE = "engine"  # an in-process engine raised for this request
    ENGINE_DEAD = "engine_dead"  # the engine or server died
    REPLICA_DEAD = "replica_dead"  # one replica of several died; the others serve on
    CANCELLED = "cancelled"  # the run stopped before the request finished


class BackendRequestError(LLMCompareError):
    """A single request failed; the run continues (see the runner's error policy)."""

    def __init__(self, kind: FailureKind | str, message: str, status: int | None = None) -> None:
        kind = FailureKind(kind)  # an unknown kind is a bug: ValueError names it
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.status = status
