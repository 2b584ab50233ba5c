"""The one interface every serving framework is driven through.

A backend owns I/O with an engine (in-process or over the network). It knows nothing about
load generation: the runner decides *when* a request is sent, the backend only streams it and
stamps each event with ``time.perf_counter_ns()`` the moment it is seen (for HTTP: the first
byte of the event). Metrics are computed later from these raw stamps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """One request of a workload, identical for every backend."""

    request_id: str
    max_tokens: int
    prompt_token_ids: tuple[int, ...] | None = None
    prompt_text: str | None = None
    # chat-style prompt; backends that take text render it with the model's chat template
    messages: tuple[tuple[str, str], ...] | None = None
    # force exactly max_tokens output tokens (ignore_eos) where the backend can
    ignore_eos: bool = True
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int | None = None
    logprobs: int | None = None  # number of top logprobs per output token, None = off

    def __post_init__(self) -> None:
        if self.prompt_token_ids is None and self.prompt_text is None and self.messages is None:
            raise ValueError(f"request {self.request_id}: needs prompt_token_ids, prompt_text or messages")
        if self.max_tokens <= 0:
            raise ValueError(f"request {self.request_id}: max_tokens must be > 0")


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One streamed event carrying one or more new output tokens.

    ``t_ns`` is ``perf_counter_ns()`` at the first moment the event was visible to the client.
    Several tokens in one event share its timestamp; metrics attribute the inter-token gap to the
    first token of the event and 0 to the rest (see compare/metrics.py).
    """

    t_ns: int
    token_ids: tuple[int, ...]
    text: str = ""
    # per-token logprob of the sampled token, aligned with token_ids, when asked for
    logprobs: tuple[float, ...] | None = None
    # top-k alternatives per token: ({token_id: logprob}, ...), when asked for
    top_logprobs: tuple[dict[int, float], ...] | None = None

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """Last item of every successful stream."""

    t_ns: int
    finish_reason: str | None = None
    prompt_tokens: int | None = None  # as counted by the engine/server
    completion_tokens: int | None = None  # as counted by the engine/server (usage)
    # engine/server-side per-request timings, when the engine exposes them (seconds)
    engine_metrics: dict[str, float] = field(default_factory=dict)


StreamItem = TokenEvent | StreamEnd


class BackendRequestError(Exception):
    """A single request failed; the run continues (see the runner's error policy)."""

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind  # e.g. connect, timeout, http_4xx, http_5xx, protocol, engine, cancelled
        self.message = message
        self.status = status


class BackendStartError(Exception):
    """The engine/server could not be started; message is one line naming cause and fix."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    forced_output_length: bool  # honours ignore_eos + max_tokens exactly
    token_id_prompts: bool  # accepts prompts as token ids (no re-tokenisation)
    logprobs: bool
    continuous_batching: bool  # serves several requests at once
    server_metrics: bool = False  # exposes Prometheus/JSON metrics we scrape
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "forced_output_length": self.forced_output_length,
            "token_id_prompts": self.token_id_prompts,
            "logprobs": self.logprobs,
            "continuous_batching": self.continuous_batching,
            "server_metrics": self.server_metrics,
            "notes": list(self.notes),
        }


@dataclass(frozen=True, slots=True)
class BackendDescription:
    """What actually ran: stored in run.json next to the numbers."""

    name: str  # our backend name, e.g. "vllm"
    framework: str  # e.g. "vllm", "transformers", "text-generation-inference"
    version: str
    native_config: dict[str, Any]  # the resolved configuration the engine was started with
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. loaded quantization, kernel, /info

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "framework": self.framework,
            "version": self.version,
            "native_config": self.native_config,
            "extra": self.extra,
        }


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

    # Optional, detected with hasattr by the runner (server-side metrics around a load level):
    #   async def on_level_start(self, label: str) -> None
    #   async def on_level_end(self, label: str) -> dict   # stored as levels[label].server_metrics
