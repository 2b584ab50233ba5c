"""Immutable records every layer shares: what a request is, what a stream yields, what a
backend can do and what ran, and the per-request record every metric is computed from."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Callable

# (backends import them from here)
from core.backend_info import BackendDescription as BackendDescription, Capabilities as Capabilities


# a request's bounds: the workload's longest length (compare/workload/lengths.py MAX_LENGTH), and
# token ids as every engine stores them (int32)
MAX_REQUEST_TOKENS = 1 << 20
MAX_TOKEN_ID = 2**31 - 1


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
    # a multi-turn session's turn (compare/workload/sessions.py): its turns are sent in order, each
    # ``think_time_s`` after the reply before it ended; None: a single request
    session_id: str | None = None
    turn: int | None = None
    think_time_s: float = 0.0

    def __post_init__(self) -> None:
        if self.prompt_token_ids is None and self.prompt_text is None and self.messages is None:
            raise ValueError(f"request {self.request_id}: needs prompt_token_ids, prompt_text or messages")
        if self.max_tokens <= 0:
            raise ValueError(f"request {self.request_id}: max_tokens {self.max_tokens}: should be > 0")
        if self.max_tokens > MAX_REQUEST_TOKENS:  # (a replayed file asking 10**9 ran for ever)
            raise ValueError(f"request {self.request_id}: max_tokens {self.max_tokens}: should be at most "
                             f"{MAX_REQUEST_TOKENS}")
        ids = self.prompt_token_ids
        if ids and (min(ids) < 0 or max(ids) > MAX_TOKEN_ID):  # no engine has such a token
            bad = next(t for t in ids if t < 0 or t > MAX_TOKEN_ID)
            raise ValueError(f"request {self.request_id}: prompt token id {bad}: should be from 0 to {MAX_TOKEN_ID}")


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One streamed event carrying one or more new output tokens.

    ``t_ns`` is ``perf_counter_ns()`` at the first moment the event was visible to the client.
    Several tokens in one event share its timestamp; metrics attribute the inter-token gap to the
    first token of the event and 0 to the rest (see compare/analysis/metrics.py).
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


@dataclass(frozen=True, slots=True)
class TokenBatch:
    """Many token events of one stream at once, as the HTTP client's native receive path records
    them (backends/http/_fastsse.h): the same stamps, counts, ids and logprobs the TokenEvents
    would carry, without their text. Only streamed to a consumer that said it takes them
    (``RequestContext.batches``); everyone else gets TokenEvents."""

    times_ns: tuple[int, ...]
    counts: tuple[int, ...]
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None


class Lane:
    """One closed-loop stream of a level (an executor worker). Its next request is taken early so a
    backend that can send it the moment the current response ends -- the HTTP client's receive
    thread -- does so without waiting on Python (after many streams end together, the event loop
    reaches each resend late). ``take_next()``: that request (taken once; None: none left, or the
    level is stopping). ``sent_on``: the backend's handle once it handed the request over; its
    ``left()`` says (once the current request has ended) whether it was sent."""

    __slots__ = ("_pop", "next", "sent_on")

    def __init__(self, pop: Callable[[], "GenerationRequest | None"]) -> None:
        self._pop = pop
        self.next: GenerationRequest | None = None
        self.sent_on: Any = None

    def take_next(self) -> "GenerationRequest | None":
        if self.next is None:
            self.next = self._pop()
        return self.next

    def next_left(self) -> bool:
        """The next request was already sent by the backend (it must be read, even by a stopping level)."""
        return self.sent_on is not None and self.sent_on.left()


@dataclass(slots=True)
class RequestContext:
    """One request's exchange between its consumer and the backend: ``backend.stream(request,
    ctx)``. The consumer (the executor's run_one) says how it reads the stream; the backend writes
    back when the request left. Mutable on purpose (the backend's answer); made per request. A
    caller that passes none gets TokenEvents and no send stamp."""

    batches: bool = False  # the consumer takes TokenBatch items (the HTTP client's native path)
    lane: Lane | None = None  # the closed-loop stream the request belongs to; None: open loop or none
    # set by a backend that can tell: perf_counter_ns right after the request's bytes left (the send
    # stamp: a busy client delays the request, and the delay is then not counted as the server's
    # time to the first token) and, where the writer was preempted around the write, the window the
    # bytes left in (the stamp is then its start); 0: not known
    sent_ns: int = 0
    send_window_ns: int = 0

StreamItem = TokenEvent | TokenBatch | StreamEnd


@dataclass(frozen=True, slots=True)
class RequestRecord:
    request_id: str
    backend: str
    level: str
    # perf_counter_ns() when the request's bytes left (HTTP: right after the write), else just
    # before it was handed to the backend
    t_sent_ns: int
    t_scheduled_ns: int | None = None  # intended send time (open loop), same clock
    event_times_ns: tuple[int, ...] = ()  # one stamp per streamed event
    event_token_counts: tuple[int, ...] = ()  # tokens carried by each event
    token_ids: tuple[int, ...] = ()
    t_end_ns: int | None = None  # StreamEnd (or failure) time
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    requested_tokens: int | None = None
    error_kind: str | None = None
    error: str | None = None
    engine_metrics: dict[str, float] = field(default_factory=dict)
    logprobs: tuple[float, ...] | None = None
    repeat: int = 0  # which repeat of the backend (``compare run --repeats``) produced it
    # when the client was ready to send it (perf_counter_ns before the backend got it): with
    # t_sent_ns, the client's own send delay; lateness = t_sent - (t_scheduled or t_ready)
    t_ready_ns: int | None = None
    # the writer lost its CPU around the send (backends/http/rxstamp.py send_stamp): the bytes left
    # within this many ns after t_sent_ns, so the TTFT may hold up to that much client time
    send_window_ns: int | None = None
    # a time-bounded level's steady-state trim (compare/analysis/steady.py): "warmup" (sent in the
    # level's first seconds) or "cooldown" (finished after the measured window): kept in the raw
    # records, left out of the level's statistics
    trimmed: str | None = None

    @property
    def send_lateness_ns(self) -> int | None:
        """How late the request left vs when it should have (scheduled, else ready): the client's
        own delay, kept out of TTFT since t_sent_ns is the moment the bytes left."""
        due = self.t_scheduled_ns if self.t_scheduled_ns is not None else self.t_ready_ns
        return None if due is None else max(0, self.t_sent_ns - due)

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def output_tokens(self) -> int:
        """Counted from token ids; falls back to the server's usage when ids are not streamed."""
        if self.token_ids:
            return len(self.token_ids)
        if self.event_token_counts:
            return sum(self.event_token_counts)
        return self.usage_completion_tokens or 0

    def to_json(self) -> dict[str, Any]:
        # field by field, not dataclasses.asdict: asdict deep-copies every element of the stamp
        # and token tuples (~0.2-0.6 ms a 96-token record), and records are written while a
        # level runs, on the client's event loop
        d = {f: getattr(self, f) for f in _RECORD_FIELDS}
        for k in ("event_times_ns", "event_token_counts", "token_ids", "logprobs"):
            if d[k] is not None:
                d[k] = list(d[k])
        d["engine_metrics"] = dict(self.engine_metrics)
        return d

    @classmethod
    def from_json(cls, d: Any) -> "RequestRecord":
        """A requests.jsonl line's record, every field checked against its type (core.shape:
        ShapeError, a ValueError, naming the field and the value)."""
        from core.shape import dataclass_from

        d = dict(d) if isinstance(d, dict) else d
        if isinstance(d, dict):
            for k in ("event_times_ns", "event_token_counts", "token_ids"):
                d[k] = d.get(k) or ()
        rec: RequestRecord = dataclass_from(cls, d, finite=False)
        return rec


_RECORD_FIELDS = tuple(f.name for f in fields(RequestRecord))
