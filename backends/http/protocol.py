"""What a wire protocol is: a payload builder, a parser per stream, where to send and how to check health.

``build_payload(request, model) -> dict``: the JSON body for one GenerationRequest.
``new_stream() -> StreamParser``: one response's parser. ``feed(raw) -> list[TokenEvent | Done |
Error]``: one SSE event -> what it means (empty list for events that carry nothing, e.g. the chat
role chunk); a single event may carry tokens AND the finish reason (OpenAI's last chunk), hence a
list. ``engine_metrics()``: what the server said about this request, for its StreamEnd. Whatever
a format must remember between events (a running token count, the server's timings) lives in
that parser object, one per stream: never in a module global, never keyed on ids the server
chooses. Formats that need nothing between events give ``parse_event`` and get a stateless parser.

Token counting: tokens are counted from the token ids the server streams (vLLM
``return_token_ids``, TGI ``token.id``) or from logprob entries; several tokens in one event are
several tokens sharing the event's timestamp (compare/analysis/metrics.py gives the gap to the first and
0 to the others). When a server streams neither, each non-empty event counts as one token and
its ids are ``-1`` placeholders (``UNKNOWN_ID``); the server's ``usage`` total is kept beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Protocol as _Interface, runtime_checkable

from core.records import GenerationRequest, TokenBatch, TokenEvent
from core.errors import BackendRequestError, FailureKind
from backends.http.sse import BATCH, RawEvent, Sink, loads, one_line, snippet

UNKNOWN_ID = -1
# Protocol.fast: the receive thread's parser of a format (backends/http/_fastsse.h FAST_*); 0: none
FAST_OPENAI, FAST_OPENAI_CHAT, FAST_TGI = 1, 2, 3

# TokenEvent (frozen slots dataclass) built without its generated __init__ (5 object.__setattr__
# calls, ~1 us): one is built per streamed event on the client's one core. Same object; the
# assert makes a field added to TokenEvent fail here instead of leaving a slot unset.
assert [f.name for f in fields(TokenEvent)] == ["t_ns", "token_ids", "text", "logprobs", "top_logprobs"]
_new = object.__new__
_set_t, _set_ids, _set_text, _set_lps, _set_tops = (getattr(TokenEvent, f).__set__ for f in (
    "t_ns", "token_ids", "text", "logprobs", "top_logprobs"))


def token_event(t_ns: int, token_ids: tuple[int, ...], text: str = "", logprobs: tuple[float, ...] | None = None,
                top_logprobs: tuple[dict[int, float], ...] | None = None) -> TokenEvent:
    """``TokenEvent(t_ns, token_ids, text, logprobs, top_logprobs)``, faster."""
    ev = _new(TokenEvent)
    _set_t(ev, t_ns)
    _set_ids(ev, token_ids)
    _set_text(ev, text)
    _set_lps(ev, logprobs)
    _set_tops(ev, top_logprobs)
    return ev


class BadEvent(ValueError):
    """An event's field has the wrong type or shape: the request fails as a protocol error."""


def _what(v: Any) -> str:
    return f"{type(v).__name__} {snippet(repr(v), 60)}"


def int_ids(v: Any, what: str = "token_ids") -> tuple[int, ...]:
    """A JSON list of integers (not bools, not floats, not strings) -> token ids."""
    if type(v) is list and all(type(x) is int for x in v):
        return tuple(v)
    raise BadEvent(f"{what} must be a list of integers, got {_what(v)}")


def opt_int(v: Any, what: str) -> int | None:
    if v is None or type(v) is int:
        return v
    raise BadEvent(f"{what} must be an integer, got {_what(v)}")


def opt_str(v: Any, what: str) -> str | None:
    if v is None or type(v) is str:
        return v
    raise BadEvent(f"{what} must be a string, got {_what(v)}")


def number(v: Any, what: str) -> float:
    if type(v) in (int, float):
        return float(v)
    raise BadEvent(f"{what} must be a number, got {_what(v)}")


def obj(v: Any, what: str) -> dict[str, Any]:
    """A JSON object, or {} for null/absent."""
    if v is None:
        return {}
    if type(v) is dict:
        return v
    raise BadEvent(f"{what} must be an object, got {_what(v)}")


def objects(v: Any, what: str) -> list[dict[str, Any]]:
    """A JSON list of objects, or [] for null/absent."""
    if v is None:
        return []
    if type(v) is list and all(type(x) is dict for x in v):
        return v
    raise BadEvent(f"{what} must be a list of objects, got {_what(v)}")


def bad_event(raw: RawEvent, e: BadEvent) -> "Error":
    return Error(FailureKind.PROTOCOL, f"{e}: {snippet(raw.data)}")


# HTTP-style codes in an error event's body -> the failure kind (others: 4xx / generation)
_CODE_KIND = {429: FailureKind.OVERLOADED, 422: FailureKind.VALIDATION}


def error_event(obj: dict[str, Any]) -> "Error":
    """``{"error": {"message": .., "code": ..}}`` or ``{"error": "..."}`` (OpenAI servers, vLLM,
    llama-server): a code of 429 is overload, 422 validation, other codes below 500 a client error,
    the rest a generation failure."""
    err = obj["error"]
    msg = err.get("message", str(err)) if isinstance(err, dict) else str(err)
    code = err.get("code") if isinstance(err, dict) else None
    kind = _CODE_KIND.get(code) if type(code) is int else None
    return Error(kind or (FailureKind.HTTP_4XX if type(code) is int and code < 500 else FailureKind.GENERATION),
                 str(msg))


def decode_event(raw: RawEvent, on_error: Callable[[dict[str, Any]], "Error"] = error_event
                 ) -> tuple[dict[str, Any] | None, list["Parsed"]]:
    """What every JSON event format shares: the event's object, or (None, [the Error]) when it is
    not JSON, not a JSON object, or an error event (an object with "error", read by ``on_error``)."""
    try:
        ev = loads(raw.data)
    except ValueError:
        return None, [Error(FailureKind.PROTOCOL, f"event is not JSON: {snippet(raw.data)}")]
    if type(ev) is not dict:
        return None, [Error(FailureKind.PROTOCOL, f"event is not a JSON object: {snippet(raw.data)}")]
    if "error" in ev:
        return None, [on_error(ev)]
    return ev, []


@dataclass(frozen=True, slots=True)
class Done:
    """End-of-generation information. ``terminal``: the stream is complete after this event."""

    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    terminal: bool = False


@dataclass(frozen=True, slots=True)
class Error:
    """An error the server reported inside a 200 stream (TGI does this for every error)."""

    kind: FailureKind  # same kinds as backends.http.sse (validation, overloaded, generation, ...)
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", FailureKind(self.kind))  # an unknown kind is a bug: ValueError


Parsed = TokenEvent | Done | Error
@runtime_checkable
class StreamParser(_Interface):
    """One response's parser: ``feed`` each event in order; ``engine_metrics`` at its end."""

    def feed(self, raw: RawEvent) -> list[Parsed]: ...

    def engine_metrics(self) -> dict[str, float]: ...


class StatelessParser:
    """The parser of a format that needs nothing between events. ``feed`` IS the protocol's
    ``parse_event`` (an attribute, not a method): the per-event path pays no extra call."""

    __slots__ = ("feed",)

    def __init__(self, parse: Callable[[RawEvent], list[Parsed]]) -> None:
        self.feed = parse

    def engine_metrics(self) -> dict[str, float]:
        return {}  # once per request: a fresh one, never a shared value a caller could fill


@dataclass(frozen=True)
class Protocol:
    name: str
    path: str  # POST endpoint, relative to the base URL
    build_payload: Callable[[GenerationRequest, str], dict[str, Any]]
    # what prompts the wire format takes: "ids_or_text" (completions), "text" (TGI), "messages" (chat)
    prompt: str
    info_path: str | None  # GET for server identity (/v1/models, /info)
    # a stateless format's parser of one event; a stateful one gives ``stream_parser`` instead
    parse_event: Callable[[RawEvent], list[Parsed]] | None = None
    # a new parser for each stream (a class or factory), for formats that keep state between events
    stream_parser: Callable[[], StreamParser] | None = None
    # FAST_* code: the receive thread may parse this format itself (backends/http/_fastsse.h); it
    # must give what ``new_stream()`` gives for every event. 0: every event is parsed in Python
    fast: int = 0
    health_path: str = "/health"
    token_id_prompts: bool = False
    forced_output_length: bool = False  # the server honours ignore_eos
    # the stream must end with a terminal Done; False: a finish reason also ends it (OpenAI
    # servers that omit ``[DONE]``)
    terminated_by_done: bool = False

    def __post_init__(self) -> None:
        if (self.parse_event is None) == (self.stream_parser is None):
            raise ValueError(f"protocol {self.name!r}: give exactly one of parse_event (stateless) and stream_parser")

    def new_stream(self) -> StreamParser:
        """A parser for one response, holding whatever this stream needs between its events."""
        if self.stream_parser is not None:
            return self.stream_parser()
        parse = self.parse_event
        assert parse is not None  # (__post_init__: a protocol gives exactly one of the two)
        return StatelessParser(parse)


class EventSink(Sink):
    """One response's parsed stream: token events in order, plus what Done events said.

    ``push`` runs where the event was framed (inside ``data_received`` on our transport), so the
    reader only takes batches. The raw observer still sees every event. After a terminal Done the
    rest of the body is read (the connection goes back to the pool) but not parsed; an Error (or
    any exception of the parser, as a protocol error quoting the event) ends the parsing.

    Items are the TokenEvents, buffered for the whole stream: the executor pauses the cyclic GC
    during a level (compare/running/executor.py), otherwise 100k buffered events at 2000 streams made
    collections run often and long."""

    __slots__ = ("parse", "observe", "rid", "finish", "prompt_tokens", "completion_tokens", "terminal", "fast",
                 "observe_batch", "chain", "end_ns")

    def __init__(self, parse: Callable[[RawEvent], list[Parsed]],
                 observe: Callable[[str, RawEvent], None] | None = None, rid: str = "", bound: int = BATCH) -> None:
        super().__init__(bound)
        self.parse, self.observe, self.rid = parse, observe, rid
        self.finish: str | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.terminal = False
        # FAST_FORMATS code: the receive thread may parse this response (the reader takes TokenBatch)
        self.fast = 0
        # with ``fast``: sees (rid, times, rx_times, sse_ids) of the thread's token events
        self.observe_batch: Callable[[str, list[int], list[int], list[int]], None] | None = None
        self.chain: Any = None  # with ``fast``, in a closed loop: the next request (transport.Chain)
        # the receive stamp of the stream's end (the read that ended it, else its last event): the
        # end of the request, not when Python got round to it
        self.end_ns = 0

    def add_fast(self, res: tuple) -> None:
        """The receive thread's records of this response (backends/http/_fastsse.h): one
        TokenBatch with what the TokenEvents would have carried, and what the Done events said."""
        times = memoryview(res[1]).cast("q").tolist()
        if times and self.error is None:
            lps = memoryview(res[6]).cast("d").tolist()
            self.items.append(TokenBatch(tuple(times), tuple(memoryview(res[3]).cast("i").tolist()),
                                         tuple(memoryview(res[4]).cast("q").tolist()), tuple(lps) if lps else None))
            if self.observe_batch is not None:
                self.observe_batch(self.rid, times, memoryview(res[2]).cast("q").tolist(),
                                   memoryview(res[5]).cast("q").tolist())
        finish, prompt, completion, terminal = res[7:11]
        self.finish = finish or self.finish
        if prompt >= 0:
            self.prompt_tokens = prompt
        if completion >= 0:
            self.completion_tokens = completion
        self.terminal = self.terminal or bool(terminal)
        if res[0] == 1:
            self.ready = True
            self.end_ns = res[23] or self.end_ns

    def push(self, raw: RawEvent) -> None:
        self.end_ns = raw.t_ns
        if self.observe is not None:
            self.observe(self.rid, raw)
        if self.terminal or self.error is not None:
            return  # read the body to its end, parse nothing more
        try:
            parsed = self.parse(raw)
        except Exception as e:  # parsing is total: whatever a server sends fails this request only
            self.fail(BackendRequestError(FailureKind.PROTOCOL, f"cannot parse event ({type(e).__name__}: "
                                          f"{one_line(str(e))}): {snippet(raw.data)}"))
            return
        if len(parsed) == 1 and type(parsed[0]) is TokenEvent:  # the usual event: one token event
            self.items.append(parsed[0])
            if len(self.items) >= self.bound:
                self.ready = True
            return
        for item in parsed:
            if type(item) is TokenEvent:
                self.items.append(item)
            elif type(item) is Done:
                self.finish = item.finish_reason or self.finish
                if item.prompt_tokens is not None:
                    self.prompt_tokens = item.prompt_tokens
                if item.completion_tokens is not None:
                    self.completion_tokens = item.completion_tokens
                self.terminal = self.terminal or item.terminal
            else:
                self.fail(BackendRequestError(item.kind, item.message))
                return
        if len(self.items) >= self.bound:
            self.ready = True
