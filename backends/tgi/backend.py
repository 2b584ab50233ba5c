"""``tgi``: Hugging Face text-generation-inference run from its container, driven over its native
``/generate_stream`` protocol. ``tgi@URL`` talks to an already running TGI server instead.

Default image ghcr.io/huggingface/text-generation-inference:3.3.7 (the container listens on 80);
another image with ``--native tgi.image=NAME`` (e.g. the local TGI-protocol test double
llm-compare/tgi-double:0.32.0, see containers/images/). The launcher argv/env come from
adapters/tgi.py; after start, ``GET /info`` is stored as the resolved configuration.

Honest limits: TGI has no ignore_eos, so output lengths cannot be forced (comparisons use
length-matched tokens); TGI is in maintenance mode upstream (minor fixes only).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from adapters.spec import ServingSpec, UnsupportedSpecError
from adapters.target import Target
from adapters.tgi import CONTAINER_PORT, limits_plan, tgi_launcher_args
from adapters.tgi_options import option_table
from backends.http.tgi_client import CLIENT_NOTES, DEFAULT_TGI_CLIENT, TGI_CLIENTS
from backends.container_http import ContainerHttpBackend, container_options, model_in_container
from backends.http_backends import TextGenerationStreaming, TgiEndpointBackend
from backends.tgi import DEFAULT_IMAGE, LENGTH_NOTE, MAINTENANCE_NOTE, with_maintenance_note
from containers.manager import ContainerSpec
from core.records import BackendDescription, Capabilities

DEFAULTS = {"image": DEFAULT_IMAGE, "gpus": "all", "shm_size": "1g", "host_port": None,
            "pull": False, "ready_timeout_s": 900}
# container env from the user's environment when set: (container name, our env name); never shown
# or stored. The HTTP client sends $LLM_COMPARE_API_KEY as its bearer token, TGI checks API_KEY.
PASSTHROUGH_ENV = (("HF_TOKEN", "HF_TOKEN"), ("API_KEY", "LLM_COMPARE_API_KEY"))



@dataclass(frozen=True)
class TgiPlan:
    """The container and launcher command for a spec, resolved once per run."""

    container: ContainerSpec
    options: dict[str, Any]
    argv: tuple[str, ...]
    env: dict[str, str]
    limits: dict[str, Any] = field(default_factory=dict)  # admission/batch limits and their source
    client: str = DEFAULT_TGI_CLIENT


def tgi_client(spec: ServingSpec | None) -> str:
    """``--native tgi.client=``: which client streams (backends/http/tgi_client.py)."""
    name = str((spec.native_for("tgi") if spec is not None else {}).get("client", DEFAULT_TGI_CLIENT))
    if name not in TGI_CLIENTS:
        raise UnsupportedSpecError("tgi", f"native client={name}", "unknown TGI client", " or ".join(TGI_CLIENTS))
    return name


def _without_client(spec: ServingSpec) -> ServingSpec:
    native = {k: dict(v) for k, v in spec.native.items()}
    native.get("tgi", {}).pop("client", None)
    return spec.model_copy(update={"native": native})


def container_spec(spec: ServingSpec, target: Target) -> TgiPlan:
    """The container spec, options, launcher argv and env for a spec and its probed model."""
    client = tgi_client(spec)
    opts = container_options(_without_client(spec), "tgi", DEFAULTS)
    model_path, mounts = model_in_container(spec.model)
    argv, env = tgi_launcher_args(spec, model_path=model_path, target=target)
    limits = limits_plan(argv, target.load, "--max-concurrent-requests" in spec.native_for("tgi"))
    cs = ContainerSpec(image=str(opts["image"]), command=tuple(argv), container_port=CONTAINER_PORT,
                       env=tuple(sorted({**env, **dict(opts["env"])}.items())), mounts=mounts, shm_size=opts["shm_size"],
                       gpus=opts["gpus"], host_port=opts["host_port"])
    return TgiPlan(cs, opts, tuple(argv), env, limits, client)


def tgi_plan(spec: ServingSpec, native: TgiPlan | None = None, target: str | None = None) -> dict[str, Any]:
    """`compare plan`: the container's launcher command (``tgi``) or the endpoint (``tgi@URL``)."""
    if native is None:
        from backends.http_backends import endpoint_plan

        client = tgi_client(spec)
        return {**endpoint_plan(spec, None, target), "client": client, "client_why": CLIENT_NOTES[client],
                "spec_options": option_table(spec)}
    cs, opts, argv = native.container, native.options, native.argv
    return {
        "image": cs.image,
        "launcher_argv": ["text-generation-launcher", *argv],
        "launcher_env": {**cs.redacted_env(),
                         **{k: f"*** from ${src} when set" for k, src in PASSTHROUGH_ENV}},
        "container": cs.settings(),
        "pull": opts["pull"],
        "protocol": "tgi native (POST /generate_stream, SSE); ready = GET /health 200",
        "resolved_config": "GET /info after start, with the KV budget TGI chose (metric "
                           "tgi_batch_max_total_tokens; TGI 3.3's /info has no dtype or batch budgets)",
        "spec_options": option_table(spec),
        "limits": native.limits,
        "client": native.client,
        "client_why": CLIENT_NOTES[native.client],
        "notes": [LENGTH_NOTE, MAINTENANCE_NOTE],
    }


async def read_info(base_url: str) -> dict[str, Any]:
    """GET /info: through text-generation's transport when the package is installed, else httpx."""
    from core.lazy import importable

    try:
        if importable("text_generation"):
            from backends.http.tgi_client import get_json

            status, body = await get_json(base_url, "/info")
        else:
            async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as c:
                r = await c.get("/info")
                status, body = r.status_code, r.json()
    except Exception as e:  # a failed /info must not fail a started server: it is recorded
        return {"error": f"{type(e).__name__}: {e}"}
    return body if status == 200 and isinstance(body, dict) else {"error": f"HTTP {status}"}


# TGI 3.3's /info dropped the batch budgets (router/src/lib.rs); the KV budget it resolved at
# warm-up is exported as a gauge instead (backends/v3/src/lib.rs)
KV_BUDGET_METRIC = "tgi_batch_max_total_tokens"


def kv_budget_from_metrics(text: str) -> int | None:
    """The ``tgi_batch_max_total_tokens`` sample of a Prometheus exposition, None when absent."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == KV_BUDGET_METRIC:
            try:
                return int(float(value.split()[0]))
            except (ValueError, IndexError):
                return None
    return None


async def read_kv_budget(base_url: str) -> int | None:
    """The KV-cache budget in tokens TGI chose, from GET /metrics; None when not exported."""
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=10.0) as c:
            r = await c.get("/metrics")
    except httpx.HTTPError:
        return None
    return kv_budget_from_metrics(r.text) if r.status_code == 200 else None


class TgiEndpoint(TextGenerationStreaming, TgiEndpointBackend):
    """``tgi@URL``: an already running TGI server, with the client the spec names."""

    def __init__(self, spec: ServingSpec | None = None, name: str = "tgi", target: str | None = None,
                 **kw: Any) -> None:
        super().__init__(spec, name, target=target, **kw)
        self.client = tgi_client(spec)


class TgiContainerBackend(ContainerHttpBackend, TextGenerationStreaming):
    framework = "text-generation-inference"
    health_path = "/health"

    def __init__(self, spec: ServingSpec, name: str = "tgi", native: TgiPlan | None = None, **kw: Any) -> None:
        if native is None:  # the run's plan (backends/registry.py), else resolved here
            from backends.models.probe import probe

            native = container_spec(spec, probe(spec.model))  # UnsupportedSpecError before any I/O
        cs, opts, argv = native.container, native.options, list(native.argv)
        passthrough = tuple((k, os.environ[src]) for k, src in PASSTHROUGH_ENV if os.environ.get(src))
        if passthrough:
            cs = replace(cs, env=cs.env + passthrough)
        self.launcher_argv = argv
        self.limits = native.limits
        self.info: dict[str, Any] = {}
        super().__init__(spec, name, protocol="tgi", container_spec=cs, options=opts, **kw)
        self.client = native.client

    async def _after_ready(self) -> None:
        # /info is what TGI actually resolved (max tokens, version, sha); the KV budget from /metrics
        self.info = await read_info(self.base_url or "")
        budget = await read_kv_budget(self.base_url or "")
        if budget is not None:
            self.info = {**self.info, "max_batch_total_tokens": budget}
        self._version = str(self.info.get("version", self._version))

    @property
    def capabilities(self) -> Capabilities:
        return with_maintenance_note(super().capabilities)

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.native_config.update({"image": self.container_spec.image,
                                "launcher_argv": ["text-generation-launcher", *self.launcher_argv],
                                "launcher_env": self.container_spec.redacted_env(),
                                "resolved": self.info, "limits": self.limits})
        return d


def make_tgi(spec: ServingSpec, name: str = "tgi", target: str | None = None,
             native: TgiPlan | None = None, **kw: Any) -> TgiEndpoint | TgiContainerBackend:
    """``tgi`` -> the container; ``tgi@URL`` -> an already running server."""
    if target:
        return TgiEndpoint(spec, name, target=target, **kw)
    return TgiContainerBackend(spec, name, native=native, **kw)


def resolve(spec: ServingSpec, target: Target) -> TgiPlan:
    return container_spec(spec, target)


def docker_check() -> tuple[bool, str]:
    """`compare backends`: can the container run here (daemon + default image)?"""
    from core.errors import UserError
    from containers.manager import connect, ensure_image

    try:
        client = connect()
        ensure_image(client, DEFAULT_IMAGE, pull_flag="--native tgi.pull=true")
    except UserError as e:
        return False, f"{e} (tgi@URL needs no Docker)"
    return True, "ready (Docker daemon up, image present)"
