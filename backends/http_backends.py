"""HTTP backends: any server that streams OpenAI or TGI-native SSE, and the vLLM server we launch.

Reuse (e.g. a container backend): start your server, then stream through ``HttpStreamBackend``::

    from backends.http_backends import HttpStreamBackend
    backend = HttpStreamBackend(spec, name="tgi", protocol="tgi", base_url="http://127.0.0.1:8080",
                                metrics="prometheus")        # or "trtllm-json" / None
    async with backend:                                     # opens the client, checks health, reads /info
        async for item in backend.stream(request): ...      # TokenEvent... StreamEnd, or BackendRequestError

Subclass and override ``_start_server()`` / ``_stop_server()`` to own a server's lifecycle (see
backends/vllm/server.py); ``base_url`` may be set there; do not override ``stream`` (client
processes rebuild this class's, ``client_recipe()``), or override ``client_recipe`` too.
Protocols: those of backends/http/protocols.py -- "openai" (completions), "openai-chat", "tgi"
(native /generate_stream), "trtllm-openai", "llamacpp" ... Every protocol goes through the same
SSE reader, each response with its own parser, so timing is identical across them.

Registered names: ``openai@URL``, ``openai-chat@URL``, ``tgi@URL`` (already running servers) and
``vllm-server`` (launches vLLM's OpenAI server with the in-process backend's engine config).
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlsplit

import httpx

from adapters.spec import ServingSpec, UnsupportedSpecError
from core.records import (BackendDescription, Capabilities, GenerationRequest, RequestContext, StreamEnd,
                          StreamItem)
from core.errors import BackendRequestError, BackendStartError, FailureKind
from backends.base import BackendBase, ClientRecipe
from backends.http.protocol import EventSink, Protocol
from backends.http.protocols import get_protocol, protocols
from backends.http.sse import RawEvent, read_events
from backends.http.transport import Chain, StreamingTransport
from backends.http.tgi_client import DEFAULT_TGI_CLIENT
from backends.http.urls import redact_url, split_userinfo

# Connect fast, but let one silent gap last as long as a request may (the executor's
# per-request timeout bounds the whole request; read_timeout bounds a dead-but-open socket).
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0
API_KEY_ENV = "LLM_COMPARE_API_KEY"  # sent as a bearer token; never logged or stored

def http_capabilities(protocol: str | Protocol, server_metrics: bool = True) -> Capabilities:
    """What a server behind ``protocol`` can do; the one declaration for the class and its entry."""
    p = get_protocol(protocol) if isinstance(protocol, str) else protocol
    notes = [f"HTTP {p.name} protocol ({p.path}); timing at the first byte of each SSE event"]
    if not p.forced_output_length:
        notes.append("no ignore_eos: output lengths cannot be forced; compare length-matched tokens")
    return Capabilities(forced_output_length=p.forced_output_length, token_id_prompts=p.token_id_prompts,
                        logprobs=True, continuous_batching=True, server_metrics=server_metrics, notes=tuple(notes))


class HttpStreamBackend(BackendBase):
    """Streams requests to ``base_url`` with one protocol; measures with the shared SSE reader."""

    framework = "http"
    # what a client process of a sharded level (compare/running/multiproc_worker.py) rebuilds this
    # backend's client as (client_recipe()): a "module:Class" taking this class's keyword
    # arguments, with client_settings() then set on it as attributes
    client_class = "backends.http_backends:HttpStreamBackend"

    def client_settings(self) -> dict[str, Any]:
        return {}

    def __init__(self, spec: ServingSpec | None = None, name: str = "http", *, protocol: str | Protocol = "openai",
                 base_url: str | None = None, target: str | None = None, model: str | None = None,
                 metrics: str | None = "prometheus", max_connections: int = 4096,
                 read_timeout_s: float = READ_TIMEOUT_S, fast_transport: bool = True,
                 auth: str | None = None) -> None:
        self.spec = spec
        self.name = redact_url(name)
        self.protocol = get_protocol(protocol) if isinstance(protocol, str) else protocol
        self.base_url = (base_url or target or "").rstrip("/") or None
        self._basic_auth: str | None = None
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise UnsupportedSpecError(self.name, f"target {redact_url(self.base_url)!r}", "not an http(s) URL",
                                       f"{name.partition('@')[0]}@http://127.0.0.1:8000")
        if self.base_url is not None:
            self.base_url, self._basic_auth = split_userinfo(self.base_url)
        if auth is not None:  # an Authorization header taken from a URL already (a client process's)
            self._basic_auth = auth
        self.request_timeout_s: float | None = None  # the run's --timeout (set_request_timeout)
        self.model = model
        self.metrics_kind = metrics
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.fast_transport = fast_transport
        # optional tap on every raw event (compare calibrate compares them with server stamps)
        self.raw_observer: Callable[[str, RawEvent], None] | None = None
        # the same for streams the receive thread parses: (rid, stamps, read times, SSE ids as int)
        self.batch_observer: Callable[[str, list[int], list[int], list[int]], None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._post: Any = None  # StreamingTransport.poster for http:// (no httpx per-request work)
        self._transport: StreamingTransport | None = None
        self._scraper: Any = None
        self._tokenizer: Any = None
        self._info: dict[str, Any] = {}
        self._version = "unknown"

    # ------------------------------------------------------------------ lifecycle
    @property
    def engine_is_local(self) -> bool:
        """The server runs on this machine: launched here (a subclass's _start_server: vllm-server,
        containers) or at a loopback URL."""
        starts_server = type(self)._start_server is not HttpStreamBackend._start_server
        host = urlsplit(self.base_url or "").hostname or ""
        return starts_server or host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")

    @property
    def capabilities(self) -> Capabilities:
        return http_capabilities(self.protocol, self.metrics_kind is not None)

    async def _start_server(self) -> None:
        """Hook for subclasses that launch the server; endpoint backends have nothing to start."""

    async def _stop_server(self) -> None:
        """Hook for subclasses: stop what _start_server started (always called on exit)."""

    async def __aenter__(self) -> "HttpStreamBackend":
        try:
            await self._start_server()
            if not self.base_url:
                raise BackendStartError(f"no base URL; use {self.name}@http://HOST:PORT")
            headers = {"Accept-Encoding": "identity"}
            key = os.environ.get(API_KEY_ENV)
            if key:
                headers["Authorization"] = f"Bearer {key}"
            elif self._basic_auth:
                headers["Authorization"] = self._basic_auth
            # plain http: our lean transport (stamps on receipt; docs/benchmarks.md); https: httpx's own
            transport = StreamingTransport() if self.base_url.startswith("http://") and self.fast_transport else None
            self._client = httpx.AsyncClient(
                base_url=self.base_url, headers=headers, transport=transport,
                timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=self.read_timeout_s, pool=None),
                limits=httpx.Limits(max_connections=self.max_connections,
                                    max_keepalive_connections=self.max_connections))
            self._transport = transport
            if transport is not None:  # streaming POSTs skip httpx's request machinery (same pool)
                self._post = transport.poster(self.base_url, self._client.headers, CONNECT_TIMEOUT_S,
                                              self.read_timeout_s)
            await self._probe()
            if self.metrics_kind:
                from backends.server_metrics import MetricsScraper

                self._scraper = MetricsScraper(self._client, self.metrics_kind)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._scraper is not None:
                await self._scraper.close()
                self._scraper = None
            if self._client is not None:
                await self._client.aclose()
                self._client = None
                self._post = None
        finally:
            await self._stop_server()

    def set_request_timeout(self, timeout_s: float) -> None:
        """The run's per-request timeout (``--timeout``): how long the start-up probe may wait."""
        self.request_timeout_s = timeout_s

    async def _probe(self) -> None:
        """Fail fast with one line when the server is not there; learn the model name/version."""
        assert self._client is not None
        path = self.protocol.info_path or self.protocol.health_path
        read_s = self.request_timeout_s or CONNECT_TIMEOUT_S
        try:
            r = await self._client.get(path, timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=read_s, pool=None))
        except (httpx.ReadTimeout, httpx.WriteTimeout):
            raise BackendStartError(f"{self.base_url}{path} accepted the connection but did not answer within "
                                    f"{read_s:g} s (--timeout); is the server overloaded or hung?") from None
        except httpx.HTTPError as e:
            raise BackendStartError(f"cannot reach {self.base_url}{path} ({type(e).__name__}); "
                                    f"start the server or fix the URL") from None
        if r.status_code >= 400:
            raise BackendStartError(f"{self.base_url}{path} answered HTTP {r.status_code}; "
                                    f"is this a {self.protocol.name} server?")
        try:
            info = r.json()
        except ValueError:
            info = {}
        if self.protocol.info_path == "/v1/models":
            models = [m.get("id") for m in info.get("data", []) if isinstance(m, dict)]
            if self.model is None:
                if not models:
                    raise BackendStartError(f"{self.base_url}/v1/models lists no model")
                self.model = models[0]
            self._info = {"models": models}
            try:  # vLLM (and SGLang) answer /version
                v = await self._client.get("/version", timeout=httpx.Timeout(CONNECT_TIMEOUT_S, read=read_s, pool=None))
                if v.status_code == 200 and isinstance(v.json(), dict):
                    self._version = str(v.json().get("version", self._version))
            except (httpx.HTTPError, ValueError):
                pass
        else:
            self._info = {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))}
            self._version = str(info.get("version", "unknown"))
            self.model = self.model or info.get("model_id")

    # ------------------------------------------------------------------ prompts
    def _tok(self) -> Any:
        if self._tokenizer is None:
            src = (self.spec.tokenizer or self.spec.model) if self.spec else None
            if not src or not Path(src).exists():
                raise BackendRequestError(FailureKind.PROMPT, f"{self.protocol.name} needs text prompts and no local "
                                          f"tokenizer is known to convert token ids; pass --tokenizer DIR "
                                          f"or use --prompt-format text")
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(src)
        return self._tokenizer

    def _adapt(self, req: GenerationRequest) -> GenerationRequest:
        """Give the protocol the prompt form it takes (ids -> text, messages -> ids, text -> chat)."""
        kind = self.protocol.prompt
        if kind == "ids_or_text":
            if req.prompt_token_ids is None and req.prompt_text is None and req.messages is not None:
                ids = self._tok().apply_chat_template([{"role": r, "content": c} for r, c in req.messages],
                                                      add_generation_prompt=True, tokenize=True)
                if hasattr(ids, "keys"):
                    ids = ids["input_ids"]
                return replace(req, prompt_token_ids=tuple(ids))
            return req
        if kind == "text":
            if req.prompt_text is None and req.prompt_token_ids is not None:
                return replace(req, prompt_text=self._tok().decode(list(req.prompt_token_ids)))
            if req.prompt_text is None and req.messages is not None:
                text = self._tok().apply_chat_template([{"role": r, "content": c} for r, c in req.messages],
                                                       add_generation_prompt=True, tokenize=False)
                return replace(req, prompt_text=text)
            return req
        if req.messages is None:  # chat protocol
            text = req.prompt_text if req.prompt_text is not None else self._tok().decode(list(req.prompt_token_ids or ()))
            return replace(req, messages=(("user", text),))
        return req

    # ------------------------------------------------------------------ streaming
    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        if self._client is None:
            raise BackendRequestError(FailureKind.CONNECT, f"{self.name} is not started")
        try:
            payload = self.protocol.build_payload(self._adapt(req), self.model or "")
        except ValueError as e:
            raise BackendRequestError(FailureKind.PROMPT, str(e)) from None
        # tokens are parsed where they are framed (sse.py), by this stream's own parser (whatever
        # the format keeps between events lives there); this loop only hands batches over
        parser = self.protocol.new_stream()
        sink = EventSink(parser.feed, self.raw_observer, req.request_id)
        if (ctx is not None and ctx.batches and self._post is not None
                and (self.raw_observer is None or self.batch_observer)):
            # the receive thread may parse this stream (backends/http/_fastsse.h): the consumer
            # takes TokenBatch items, and no per-event observer needs the raw events
            sink.fast = self.protocol.fast
            sink.observe_batch = self.batch_observer
            if sink.fast and ctx.lane is not None:  # a closed loop: the receive thread may send the next request
                sink.chain = Chain(ctx.lane, req.request_id,
                                   lambda r: self.protocol.build_payload(self._adapt(r), self.model or ""))
        try:
            async for batch in read_events(self._client, self.protocol.path, payload, sink, self._post, ctx=ctx):
                for item in batch:
                    yield item
        except BackendRequestError as e:
            if e.kind == FailureKind.CONNECT and "refused" in e.message.lower():
                # it answered the start-up probe, so a refusal now means it is gone: engine_dead
                # stops the level at once instead of failing every further request the same way
                raise BackendRequestError(FailureKind.ENGINE_DEAD, f"the server at {self.base_url} refused the "
                                          f"connection: it is gone ({e.message})") from None
            raise
        if not sink.terminal and (sink.finish is None or self.protocol.terminated_by_done):
            raise BackendRequestError(FailureKind.DISCONNECTED, f"stream closed before the server said it was done "
                                      f"(no {'last event' if self.protocol.terminated_by_done else 'finish reason / terminal event'}"
                                      f" of the {self.protocol.name} protocol): the server died or cut it")
        metrics = parser.engine_metrics()
        if metrics:
            self.stream_metrics(metrics)
        yield StreamEnd(t_ns=sink.end_ns or time.perf_counter_ns(), finish_reason=sink.finish, prompt_tokens=sink.prompt_tokens,
                        completion_tokens=sink.completion_tokens, engine_metrics=dict(metrics))

    def client_recipe(self) -> ClientRecipe | None:
        """This started backend's client for a client process: the same protocol (resolved there by
        name, so only a registered one), URL, credentials and limits; no server metrics (this
        process scrapes them). None where the protocol is not registered (backends/http/protocols.py)."""
        if protocols().get(self.protocol.name) is not self.protocol:
            return None
        return ClientRecipe(
            client_class=self.client_class, name=self.name, spec=self.spec, auth=self._basic_auth,
            kwargs=(("protocol", self.protocol.name), ("base_url", self.base_url), ("model", self.model),
                    ("metrics", None), ("max_connections", self.max_connections),
                    ("read_timeout_s", self.read_timeout_s), ("fast_transport", self.fast_transport)),
            settings=tuple(sorted(self.client_settings().items())))

    # ------------------------------------------------------------------ server metrics hooks
    async def on_level_start(self, label: str) -> None:
        if self._scraper is not None:
            await self._scraper.start(label)

    async def on_level_end(self, label: str) -> dict[str, Any]:
        if self._scraper is None:
            return {}
        return await self._scraper.stop(label)

    def describe(self) -> BackendDescription:
        return BackendDescription(
            name=self.name, framework=self.framework, version=self._version,
            native_config={"protocol": self.protocol.name, "endpoint": self.protocol.path,
                           "base_url": self.base_url, "model": self.model},
            extra={"server_info": self._info, "auth": f"bearer from ${API_KEY_ENV}" if os.environ.get(API_KEY_ENV) else None,
                   # which clock stamped the events (kernel receive time or user-space read time)
                   "event_clock": self._transport.clock() if self._transport is not None
                   else {"source": "user: perf_counter_ns when httpx's transport yielded the bytes"}})


class OpenAIEndpointBackend(HttpStreamBackend):
    framework = "openai-compatible"
    endpoint_protocol = "openai"  # /v1/completions

    def __init__(self, spec: ServingSpec | None = None, name: str = "openai", target: str | None = None,
                 **kw: Any) -> None:
        super().__init__(spec, name, protocol=self.endpoint_protocol, target=target, **kw)


class OpenAIChatEndpointBackend(OpenAIEndpointBackend):
    endpoint_protocol = "openai-chat"  # /v1/chat/completions


class TgiEndpointBackend(HttpStreamBackend):
    framework = "text-generation-inference"

    def __init__(self, spec: ServingSpec | None = None, name: str = "tgi", target: str | None = None,
                 **kw: Any) -> None:
        super().__init__(spec, name, protocol="tgi", target=target, **kw)


def endpoint_plan(spec: ServingSpec, native: None = None, target: str | None = None) -> dict[str, Any]:
    """An already running server: nothing is configured by us; the URL is what we talk to."""
    return {"endpoint": target, "note": "server already running; its engine config is whatever it was started with"}


class TextGenerationStreaming(HttpStreamBackend):
    """Streams through text-generation's AsyncClient when the spec asks for it
    (``--native tgi.client=text-generation``); our stamped reader otherwise."""

    client = DEFAULT_TGI_CLIENT
    # a client process of a sharded level streams through this class, with the same client
    client_class = "backends.http_backends:TextGenerationStreaming"

    def client_settings(self) -> dict[str, Any]:
        return {"client": self.client}

    @property
    def unary_quality_probes(self) -> bool:
        """The text-generation package's quality probes are single non-streamed requests
        (generate_once): its single-request path is the one that returns details.top_tokens."""
        return self.client == "text-generation"

    async def stream(self, req: GenerationRequest, ctx: RequestContext | None = None) -> AsyncIterator[StreamItem]:
        if self.client != "text-generation":
            async for item in super().stream(req, ctx):
                yield item
            return
        from backends.http import tgi_client

        if self._client is None:
            raise BackendRequestError(FailureKind.CONNECT, f"{self.name} is not started")
        adapted = self._adapt(req)
        tgi_client.validate(adapted)
        async for item in tgi_client.stream(self.base_url or "", adapted, dict(self._client.headers),
                                            self.read_timeout_s):
            yield item

    async def generate_once(self, req: GenerationRequest) -> dict[str, Any]:
        """One non-streaming request through text-generation (quality probes: no timing)."""
        from backends.http import tgi_client

        assert self._client is not None
        return await tgi_client.generate_once(self.base_url or "", self._adapt(req), dict(self._client.headers))

    def describe(self) -> BackendDescription:
        d = super().describe()
        d.native_config["client"] = self.client
        if self.client == "text-generation":
            from backends.http.tgi_client import EVENT_CLOCK

            d.extra["event_clock"] = EVENT_CLOCK
        return d
