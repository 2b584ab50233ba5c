"""A server in a container, driven over HTTP: the shared part of the tgi and vllm-container backends.

The container layer (containers/manager.py) starts the image, publishes its port on 127.0.0.1 and
waits until the server answers its protocol's health route; streaming, timing and server
metrics are HttpStreamBackend's (backends/http_backends.py), unchanged. Container settings come
from the spec's native options of the backend (``--native tgi.image=...``, ``tgi.pull=true``,
``tgi.gpus=none``, ``tgi.shm_size=2g``, ``tgi.host_port=8080``, ``tgi.ready_timeout_s=900``,
``vllm-container.env=VLLM_ATTENTION_BACKEND=FLASHINFER,OMP_NUM_THREADS=4``); engine flags are the
adapters' business.
"""
from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, AsyncIterator

import httpx

from adapters.spec import ServingSpec, UnsupportedSpecError
from core.records import BackendDescription, GenerationRequest, RequestContext, StreamItem
from core.errors import BackendRequestError, FailureKind
from backends.http_backends import HttpStreamBackend
from core.errors import UserError
from containers.manager import ContainerSpec, ManagedContainer, parse_gpus
from containers.spec import is_secret

CONTAINER_MODEL_ROOT = "/models"
CONTAINER_KEYS = {"image", "pull", "gpus", "shm_size", "host_port", "ready_timeout_s", "env"}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# request failures that may mean the container itself died (checked before reporting them)
_TRANSPORT_KINDS = frozenset({FailureKind.CONNECT, FailureKind.DISCONNECTED, FailureKind.READ, FailureKind.PROTOCOL,
                              FailureKind.HTTP_5XX, FailureKind.TIMEOUT})


def parse_env(backend: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``env``: extra environment for the server in the container, ``K=V[,K=V...]`` (or a YAML
    mapping). Secrets are refused here: native options are stored in run.json; tokens come from
    the caller's environment (HF_TOKEN, LLM_COMPARE_API_KEY), never from the spec."""
    if value is None or value == "":
        return ()
    if isinstance(value, dict):
        pairs = [(str(k), "" if v is None else str(v)) for k, v in value.items()]
    else:
        pairs = []
        for item in str(value).split(","):
            k, eq, v = item.strip().partition("=")
            if not eq:
                raise UnsupportedSpecError(backend, f"native env={value!r}", f"{item.strip()!r} is not NAME=VALUE",
                                           "write env=NAME=VALUE[,NAME=VALUE...]")
            pairs.append((k.strip(), v.strip()))
    for k, _ in pairs:
        if not _ENV_NAME.fullmatch(k):
            raise UnsupportedSpecError(backend, f"native env {k!r}", "not an environment variable name",
                                       "names are letters, digits and _ (not starting with a digit)")
        if is_secret(k):
            raise UnsupportedSpecError(backend, f"native env {k}", "looks like a secret and native options are stored "
                                       "in run.json", "export it as HF_TOKEN / LLM_COMPARE_API_KEY instead")
    return tuple(sorted(dict(pairs).items()))


def container_options(spec: ServingSpec, backend: str, defaults: dict[str, Any],
                      flags_here: bool = True) -> dict[str, Any]:
    """The backend's container settings: defaults overridden by non-flag native options.
    ``flags_here``: native keys starting with ``--`` are engine flags the adapter reads."""
    opts = dict(defaults)
    for key, value in spec.native_for(backend).items():
        if flags_here and str(key).startswith("-"):
            continue  # launcher/engine flags: the adapter's
        if key not in CONTAINER_KEYS:
            raise UnsupportedSpecError(backend, f"native {key}", "not a container setting",
                                       ", ".join(sorted(CONTAINER_KEYS)) + " (engine flags start with --)")
        opts[key] = value
    try:
        opts["gpus"] = parse_gpus(opts.get("gpus"))
    except UserError as e:
        raise UnsupportedSpecError(backend, f"native gpus={opts.get('gpus')!r}", str(e)) from None
    if opts.get("host_port") is not None:
        port = int(opts["host_port"])
        if not 0 < port < 65536:
            raise UnsupportedSpecError(backend, f"native host_port={port}", "not a port number")
        opts["host_port"] = port
    opts["pull"] = str(opts.get("pull", False)).lower() in ("1", "true", "yes")
    opts["ready_timeout_s"] = float(opts.get("ready_timeout_s", 600))
    opts["env"] = parse_env(backend, opts.get("env"))
    return opts


def model_in_container(path: str | None) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """A local model directory is mounted read-only under /models; anything else (a hub id) is
    passed through as is."""
    if path is None:
        return None, ()
    p = Path(path)
    if p.is_dir():
        host = str(p.resolve())
        inside = f"{CONTAINER_MODEL_ROOT}/{p.resolve().name}"
        return inside, ((host, inside),)
    return path, ()


class ContainerHttpBackend(HttpStreamBackend):
    """Subclasses set ``container_spec`` and ``health_path`` before calling this __init__."""

    health_path = "/health"

    def __init__(self, spec: ServingSpec, name: str, *, protocol: str, container_spec: ContainerSpec,
                 options: dict[str, Any], metrics: str | None = "prometheus", **kw: Any) -> None:
        super().__init__(spec, name, protocol=protocol, metrics=metrics, **kw)
        self.container_spec = container_spec
        self.options = options
        self.container = ManagedContainer(container_spec, backend=name, pull=options["pull"])
        # daemon reachable + image present, checked when the run is built: a missing image
        # fails the run before any other backend has spent minutes starting
        self.container.preflight()
        self.results_dir: Path | None = None
        self.ready_s: float | None = None

    def attach_results_dir(self, path: Path) -> None:
        """When the runner offers it, the container log is kept next to the results."""
        self.results_dir = Path(path)

    async def _probe_ready(self, base_url: str) -> bool:
        try:
            r = await self._ready_client.get(base_url + self.health_path)
            return r.status_code == 200
        except httpx.HTTPError:
            return False  # not listening yet, or the port proxy answered before the server did

    async def _start_server(self) -> None:
        self.base_url = await asyncio.to_thread(self.container.start)
        async with httpx.AsyncClient(timeout=2.0) as self._ready_client:
            self.ready_s = await self.container.wait_ready(self._probe_ready, self.options["ready_timeout_s"])
        await self._after_ready()

    async def _after_ready(self) -> None:
        """Hook: read what the server resolved (e.g. TGI's /info)."""

    async def _stop_server(self) -> None:
        await asyncio.to_thread(self.container.stop)
        if self.results_dir is not None and self.container.final_logs is not None:
            from core.fsutil import write_atomic

            safe = self.name.replace("/", "_").replace(":", "_").replace("@", "_")
            write_atomic(self.results_dir / f"{safe}.container.log", self.container.final_logs)

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        try:
            async for item in super().stream(req, ctx):
                yield item
        except BackendRequestError as e:
            # a transport failure may mean the container died: say so (the executor stops the level)
            if e.kind in _TRANSPORT_KINDS:
                state = await asyncio.to_thread(self.container.state)
                for _ in range(3 if e.kind in (FailureKind.CONNECT, FailureKind.DISCONNECTED) else 0):
                    # a container being killed still reads "running" for a moment
                    if state.get("Status") != "running":
                        break
                    await asyncio.sleep(0.2)
                    state = await asyncio.to_thread(self.container.state)
                if state.get("Status") not in ("running", None):
                    raise BackendRequestError(
                        FailureKind.ENGINE_DEAD, f"container {self.container.name} is {state.get('Status')} "
                        f"(exit code {state.get('ExitCode')}{', OOM-killed' if state.get('OOMKilled') else ''}); "
                        f"request failed with {e.kind}: {e.message}") from None
            raise

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.extra["container"] = self.container.describe()
        d.extra["ready_after_s"] = self.ready_s
        return d
