"""The one interface every serving framework is driven through.

A backend owns I/O with an engine (in-process or over the network). It knows nothing about
load generation: the runner decides *when* a request is sent, the backend only streams it and
stamps each event with ``time.perf_counter_ns()`` the moment it is seen (for HTTP: the first
byte of the event). Metrics are computed later from these raw stamps.

Every backend class derives from :class:`BackendBase`, which gives the optional parts of the
contract (hooks around a load level, the run's timeout, where logs go, a client process's
recipe) as no-ops: the runner calls them on every backend, never asking ``hasattr``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator, Protocol, runtime_checkable

from core.records import BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamItem

if TYPE_CHECKING:
    from adapters.spec import ServingSpec


@runtime_checkable
class Backend(Protocol):
    """``async with backend:`` starts the engine/server and always stops it again."""

    name: str
    # True: quality probes (compare/quality/parity.py) are one non-streamed request each, through
    # ``async generate_once(request) -> dict``, instead of stream()
    unary_quality_probes: bool
    engine_is_local: bool

    @property
    def capabilities(self) -> Capabilities: ...

    async def __aenter__(self) -> "Backend": ...

    async def __aexit__(self, *exc: object) -> None: ...

    def stream(self, request: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        """Yield TokenEvents (TokenBatches where ``ctx.batches``) then one StreamEnd; raise
        BackendRequestError on failure. ``ctx``: what the consumer says of this request (it takes
        batches; its closed-loop lane) and where the backend stamps when the request left
        (``ctx.sent_ns``, where it can tell); None: TokenEvents, no stamp."""
        ...

    def describe(self) -> BackendDescription: ...

    def set_request_timeout(self, timeout_s: float) -> None: ...

    def attach_results_dir(self, path: Path) -> None: ...

    async def on_level_start(self, label: str) -> None: ...

    async def on_level_end(self, label: str) -> dict[str, Any] | None: ...

    def stream_metrics(self, metrics: dict[str, float]) -> None: ...

    def client_recipe(self) -> "ClientRecipe | None": ...


class BackendBase:
    """The optional parts of the :class:`Backend` contract, each a no-op a backend overrides when
    it has something to do there."""

    name: str
    unary_quality_probes: bool = False
    # the engine runs on this machine (in this process, or a server launched here or at a loopback
    # address): client processes leave it cores
    engine_is_local: bool = True

    def set_request_timeout(self, timeout_s: float) -> None:
        """The run's per-request timeout (``--timeout``), given before the backend starts (HTTP
        servers: how long the start-up probe may wait)."""

    def attach_results_dir(self, path: Path) -> None:
        """The run's results folder, given before the backend starts: server and container logs
        are kept there."""

    async def on_level_start(self, label: str) -> None:
        """A load level is about to start (server-side metrics: sampling begins)."""

    async def on_level_end(self, label: str) -> dict[str, Any] | None:
        """The load level ended: what the server said about it (stored as
        ``levels[label].server_metrics``), or None where the backend has nothing to say."""
        return None

    def stream_metrics(self, metrics: dict[str, float]) -> None:
        """What the server said about one finished request (``StreamEnd.engine_metrics``), also
        for requests a client process sent; a backend that sums them per level keeps them here."""

    def client_recipe(self) -> "ClientRecipe | None":
        """How a client process of a sharded level (``--client-procs``) rebuilds this backend's
        client once it has started; None: its engine or its client runs in this process, so its
        requests cannot be sent from another one."""
        return None


@dataclass(frozen=True)
class ClientRecipe:
    """A started backend's client as another process rebuilds it: ``client_class(spec, name,
    **kwargs)`` (plus ``auth=`` where set), then ``settings`` set on it as attributes. It crosses a
    pipe (picklable), never argv: ``auth`` may be a credential, kept out of the repr."""

    client_class: str  # "module:Class"
    name: str
    spec: "ServingSpec | None"
    kwargs: tuple[tuple[str, Any], ...] = ()
    settings: tuple[tuple[str, Any], ...] = ()
    auth: str | None = field(default=None, repr=False)

    def build(self) -> Any:
        mod, _, cls = self.client_class.partition(":")
        kw = dict(self.kwargs) | ({"auth": self.auth} if self.auth is not None else {})
        client = getattr(importlib.import_module(mod), cls)(self.spec, self.name, **kw)
        for k, v in self.settings:
            setattr(client, k, v)
        return client
