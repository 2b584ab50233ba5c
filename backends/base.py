"""The one interface every serving framework is driven through.

A backend owns I/O with an engine (in-process or over the network). It knows nothing about
load generation: the runner decides *when* a request is sent, the backend only streams it and
stamps each event with ``time.perf_counter_ns()`` the moment it is seen (for HTTP: the first
byte of the event). Metrics are computed later from these raw stamps.
"""
from __future__ import annotations

from typing import AsyncIterator, Protocol, runtime_checkable

from core.records import BackendDescription, Capabilities, GenerationRequest, StreamItem


@runtime_checkable
class Backend(Protocol):
    """``async with backend:`` starts the engine/server and always stops it again."""

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    async def __aenter__(self) -> "Backend": ...

    async def __aexit__(self, *exc: object) -> None: ...

    def stream(self, request: GenerationRequest) -> AsyncIterator[StreamItem]:
        """Yield TokenEvents then one StreamEnd; raise BackendRequestError on failure."""
        ...

    def describe(self) -> BackendDescription: ...

    # Optional, read with getattr and a default:
    #   unary_quality_probes: bool   # True: quality probes (compare/quality/parity.py) call
    #                                # `async generate_once(request) -> dict` instead of stream()
    # Optional, detected with hasattr by the runner (server-side metrics around a load level):
    #   async def on_level_start(self, label: str) -> None
    #   async def on_level_end(self, label: str) -> dict   # stored as levels[label].server_metrics
