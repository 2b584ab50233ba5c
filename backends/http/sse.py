"""The ONE Server-Sent-Events reader every HTTP protocol goes through.

Timing rule (identical for every protocol): an event is stamped with the receive stamp of the
read holding its FIRST byte, in the ``time.perf_counter_ns()`` domain: on our transport under
Linux the kernel's receive time of the newest segment in that read (``rxstamp.py``), else the
moment the socket layer handed the read to us. Several events in one read share its stamp
(they arrived no later than it); an event split over several reads keeps the stamp of its
first. ``RawEvent.rx_ns`` keeps when Python read that first piece (equal to ``t_ns`` without
kernel stamps), so the client's own lag stays visible. Parsing happens after stamping, so JSON
decoding never inflates a latency.

Pipeline (one implementation of each step): bytes -> ``SseFramer`` (framing) -> a ``Sink``
(``protocol.EventSink``: the protocol's parser, token events buffered in order) -> the reader
``read_events``, which hands the sink's batches to the backend. Our transport
(backends/http/transport.py, ``http://``) runs framer and sink inside ``data_received`` and
wakes the reader only per batch (``EVENTS_EXTENSION``); with httpx's own transport (https)
``read_events`` feeds the same framer and sink from the response's chunks. Either way the same
events carry the same stamps.

Transport faults become ``BackendRequestError`` with a typed ``kind`` (see ERROR KINDS below).
"""
from __future__ import annotations

import functools
import json
import time
from typing import Any, AsyncIterator, Awaitable, Callable, NamedTuple

import httpx

from core.errors import BackendRequestError, FailureKind
from core.records import RequestContext

# ERROR KINDS raised here (each failed request records exactly one; docs/http-client.md#errors):
#   connect       - connection refused / DNS / TLS: the server is not there
#   timeout       - connect, read (no byte for read_timeout) or pool timeout
#   validation    - HTTP 422 (TGI: input validation)          | overloaded - HTTP 429
#   generation    - HTTP 424 (TGI: generation failed)          | http_4xx / http_5xx - other statuses
#   disconnected  - the connection broke or closed mid-stream (server died)
#   protocol      - 200 but not an event stream, a malformed response, or an event we cannot
#                   parse (not UTF-8, not JSON, a field of the wrong type); the message quotes
#                   the first SNIPPET_BYTES of what was sent
_STATUS_KIND = {422: FailureKind.VALIDATION, 424: FailureKind.GENERATION, 429: FailureKind.OVERLOADED}

_perf = time.perf_counter_ns

try:  # every event's JSON is decoded on the client's one core: msgspec is ~5x faster than json
    from msgspec.json import decode as _fast_loads  # raises msgspec.DecodeError, a ValueError
except ImportError:  # pragma: no cover - msgspec comes with vLLM; plain json works the same, slower
    _fast_loads = json.loads


def loads(data: str | bytes) -> Any:
    """One event's JSON. ValueError if it is not JSON (json's rules: NaN/Infinity are accepted)."""
    try:
        return _fast_loads(data)
    except ValueError:  # msgspec refuses NaN/Infinity and out-of-range floats, which json takes
        return json.loads(data)

# A response extension our transport (backends/http/transport.py) sets: ``async (sink) -> None``
# that returns once the sink (fed on receipt) has a batch, an error or the end. httpx's own
# transport does not set it; its bytes go through the same SseFramer and sink here instead.
EVENTS_EXTENSION = "llm_compare.sse_events"
BATCH = 64  # events a sink buffers before it wakes its reader (the end of the body always does)


class RawEvent(NamedTuple):
    """One SSE event as received: ``t_ns`` = its first byte's receive stamp, fields as sent,
    ``rx_ns`` = when Python read that byte (None: not recorded, i.e. the same as ``t_ns``).

    A NamedTuple: built once per streamed event, it costs a fraction of a frozen dataclass."""

    t_ns: int
    data: str
    event: str | None = None
    id: str | None = None
    rx_ns: int | None = None


_raw = functools.partial(tuple.__new__, RawEvent)  # RawEvent from a 5-tuple, without NamedTuple's __new__


SNIPPET_BYTES = 200  # how much of an offending event or response a protocol error quotes


def snippet(data: str | bytes, limit: int = SNIPPET_BYTES) -> str:
    """The first ``limit`` bytes/characters of what a server sent, quoted (repr: control and
    non-UTF-8 bytes stay visible and harmless in one line), "..." when cut."""
    cut = data[:limit]
    return repr(cut) + ("..." if len(data) > limit else "")


def not_utf8(block: bytes, e: UnicodeDecodeError) -> BackendRequestError:
    return BackendRequestError(FailureKind.PROTOCOL, f"event is not UTF-8 ({e.reason} at byte {e.start}): "
                               f"{snippet(block)}")


def _parse_block(block: bytes, t_ns: int, rx_ns: int) -> RawEvent | None:
    """One event block (lines without the blank terminator) -> RawEvent; None for comments only.
    BackendRequestError (protocol) when the event is not UTF-8."""
    try:
        return _parse_utf8_block(block, t_ns, rx_ns)
    except UnicodeDecodeError as e:
        raise not_utf8(block, e) from None


def _parse_utf8_block(block: bytes, t_ns: int, rx_ns: int) -> RawEvent | None:
    # fast paths (they cost most of the client's per-event CPU otherwise): one data line (vLLM,
    # TGI), and "id:" + one data line (the calibration server)
    j = block.find(b"\n")
    if j < 0:
        if block.startswith(b"data:"):
            return _raw((t_ns, block[6 if block.startswith(b" ", 5) else 5:].decode(), None, None, rx_ns))
        lines = [block]
    elif block.startswith(b"id:") and block.startswith(b"data:", j + 1) and block.find(b"\n", j + 1) < 0:
        return _raw((t_ns, block[j + (7 if block.startswith(b" ", j + 6) else 6):].decode(), None,
                     block[4 if block.startswith(b" ", 3) else 3:j].decode(), rx_ns))
    else:
        lines = block.split(b"\n")
    data: list[bytes] = []
    event = eid = None
    for line in lines:
        if not line or line[:1] == b":":
            continue  # keep-alive comment
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data.append(value)
        elif name == b"event":
            event = value.decode()
        elif name == b"id":
            eid = value.decode()
        # "retry" and unknown fields are ignored, as the SSE spec says
    if not data and event is None:
        return None
    return RawEvent(t_ns, b"\n".join(data).decode() if len(data) != 1 else data[0].decode(), event, eid, rx_ns)


class SseFramer:
    """THE Server-Sent-Events framing, incremental: ``feed(bytes, t_ns, rx_ns)`` appends each
    complete event to ``events``, stamped with the ``t_ns``/``rx_ns`` of the piece that held its
    first byte. An event that is not UTF-8 raises BackendRequestError (protocol) from ``feed``,
    after the events before it were emitted; the stream is then broken and fed no more.

    Our transport feeds it straight from ``data_received`` (the stamp is taken there, before
    any task wakes up); for other transports ``post_events`` feeds it the response's chunks.
    """

    __slots__ = ("events", "emit", "_buf", "_t", "_u", "_cr")

    def __init__(self, emit: Callable[[RawEvent], None] | None = None) -> None:
        self.events: list[RawEvent] = []
        self.emit = emit or self.events.append  # where each complete event goes
        self._buf = b""  # an event begun but not terminated yet
        self._t = self._u = 0  # ... and the stamps of its first byte
        self._cr = False  # the last piece ended in CR: maybe half of a CRLF

    def take(self) -> list[RawEvent]:
        out = self.events[:]
        self.events.clear()
        return out

    def feed(self, piece: bytes, t_ns: int, rx_ns: int) -> None:
        if not self._buf and not self._cr and b"\r" not in piece:
            i = piece.find(b"\n\n")
            if i == len(piece) - 2 and i > 0:  # the usual piece: exactly one whole event, LF line ends
                ev = _parse_block(piece[:i], t_ns, rx_ns)
                if ev is not None:
                    self.emit(ev)
                return
        if self._cr or b"\r" in piece:  # normalise CRLF / CR line ends (rare: axum, vLLM use LF)
            piece = self._lf(piece)
        if self._buf:
            buf, t, u = self._buf + piece, self._t, self._u
        else:
            buf, t, u = piece, t_ns, rx_ns
        i = buf.find(b"\n\n")
        if i < 0:
            self._buf, self._t, self._u = buf, t, u
            return
        if i == len(buf) - 2:  # the usual piece: exactly one whole event
            self._buf = b""
            if i:
                ev = _parse_block(buf[:i], t, u)
                if ev is not None:
                    self.emit(ev)
            return
        pos = 0
        while i >= 0:
            if i > pos:
                ev = _parse_block(buf[pos:i], t, u)
                if ev is not None:
                    self.emit(ev)
            t, u = t_ns, rx_ns  # any later event in this piece started in this piece
            pos = i + 2
            i = buf.find(b"\n\n", pos)
        rest = buf[pos:]
        self._buf = rest if rest.strip(b"\n") else b""  # blank lines between events start nothing
        self._t, self._u = t_ns, rx_ns

    def _lf(self, piece: bytes) -> bytes:
        if self._cr:
            piece = b"\r" + piece
        self._cr = piece.endswith(b"\r")
        if self._cr:
            piece = piece[:-1]
        return piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")

    def close(self) -> None:
        """The body ended: an unterminated event means the server died or cut the stream."""
        if self._buf.strip():
            raise BackendRequestError(FailureKind.DISCONNECTED, f"stream ended inside an event ({len(self._buf)} bytes "
                                      f"unterminated)")


class Sink:
    """Where one response's framed events go, in order, until its reader takes them.

    This base keeps RawEvents (``post_events``); ``protocol.EventSink`` parses them into token
    events right where they are framed. ``ready``: the reader should wake (full batch or error);
    ``ended``: the body is complete; ``error``: raised by the reader after the events before it."""

    __slots__ = ("items", "bound", "ready", "ended", "error")

    def __init__(self, bound: int = BATCH) -> None:
        self.items: list[Any] = []
        self.bound = bound
        self.ready = False
        self.ended = False
        self.error: BaseException | None = None

    def push(self, raw: RawEvent) -> None:
        self.items.append(raw)
        if len(self.items) >= self.bound:
            self.ready = True

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.ready = True

    def take(self) -> list[Any]:
        out, self.items = self.items, []
        self.ready = self.error is not None
        return out


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


_one_line = one_line


def refused(e: BaseException) -> bool:
    """Whether a connect error was the peer refusing (nothing listens: the server is gone)."""
    seen = 0
    x: BaseException | None = e
    while x is not None and seen < 8:
        if isinstance(x, ConnectionRefusedError) or "connection refused" in str(x).lower():
            return True
        x, seen = x.__cause__ or x.__context__, seen + 1
    return False


def error_message(body: bytes) -> str:
    """The server's error text: JSON {"error": ...} / {"message": ...} / {"detail": ...} or raw."""
    try:
        obj: Any = json.loads(body)
    except ValueError:
        return _one_line(body.decode(errors="replace"))
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("message", obj.get("detail", obj)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return _one_line(str(err))
    return _one_line(str(obj))


def status_error(status: int, body: bytes) -> BackendRequestError:
    kind = _STATUS_KIND.get(status) or (FailureKind.HTTP_4XX if status < 500 else FailureKind.HTTP_5XX)
    return BackendRequestError(kind, f"HTTP {status}: {error_message(body)}", status=status)


async def read_events(client: httpx.AsyncClient, url: str, payload: dict[str, Any], sink: Sink,
                      post: Callable[..., Awaitable[Any]] | None = None,
                      headers: dict[str, str] | None = None, ctx: RequestContext | None = None
                      ) -> AsyncIterator[list[Any]]:
    """POST ``payload`` as JSON; yield the sink's batches (in order) until the body ends.

    ``post`` (``StreamingTransport.poster``): send straight on our transport instead of through
    httpx's request machinery, which stamps ``ctx`` when the request left. Every fault is a typed
    BackendRequestError, raised after the batches received before it."""
    try:
        if post is not None:
            fast = getattr(sink, "fast", 0)  # (with it, maybe the closed loop's next request: transport.Chain)
            resp = await post(url, payload, fast, getattr(sink, "chain", None) if fast else None, ctx)
        else:
            resp = await client.send(client.build_request("POST", url, json=payload, headers=headers), stream=True)
        try:
            if resp.status_code >= 400:
                raise status_error(resp.status_code, (await resp.aread())[:4000])
            ctype = resp.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                body = (await resp.aread())[:300]
                raise BackendRequestError(FailureKind.PROTOCOL, f"expected text/event-stream, got {ctype or 'no content-type'}"
                                          f" (HTTP {resp.status_code}): {_one_line(body.decode(errors='replace'))}",
                                          status=resp.status_code)
            fill = resp.extensions.get(EVENTS_EXTENSION)
            try:
                if fill is not None:  # framed and parsed by our transport as the bytes arrived
                    while True:
                        await fill(sink)
                        if sink.items:
                            yield sink.take()
                        if sink.error is not None:
                            raise sink.error
                        if sink.ended:
                            break
                else:  # httpx's transport (https): frame its chunks here, stamped now
                    framer = SseFramer(sink.push)
                    async for chunk in resp.aiter_raw():
                        t = getattr(chunk, "t_ns", 0) or _perf()
                        try:
                            framer.feed(chunk, t, getattr(chunk, "rx_ns", t))
                        except BackendRequestError as e:  # after the events before it
                            sink.fail(e)
                        if sink.items:
                            yield sink.take()
                        if sink.error is not None:
                            raise sink.error
                    framer.close()
            except httpx.TimeoutException as e:
                raise BackendRequestError(FailureKind.TIMEOUT, f"no data for the read timeout ({type(e).__name__})") from e
            except (httpx.RemoteProtocolError, httpx.ReadError) as e:
                raise BackendRequestError(FailureKind.DISCONNECTED, f"stream broke mid-response: {type(e).__name__}: "
                                          f"{_one_line(str(e))}") from e
        finally:
            await resp.aclose()
    except httpx.ConnectError as e:
        why = "connection refused" if refused(e) else _one_line(str(e)) or "no connection"
        raise BackendRequestError(FailureKind.CONNECT, f"cannot connect to {url}: {why}") from e
    except httpx.TimeoutException as e:
        raise BackendRequestError(FailureKind.TIMEOUT, f"{type(e).__name__} on {url}") from e
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        raise BackendRequestError(FailureKind.DISCONNECTED, f"{type(e).__name__}: {_one_line(str(e))}") from e


async def post_events(client: httpx.AsyncClient, url: str, payload: dict[str, Any],
                      headers: dict[str, str] | None = None) -> AsyncIterator[RawEvent]:
    """POST ``payload`` as JSON and yield the response's RawEvents (``read_events`` with a raw sink)."""
    async for batch in read_events(client, url, payload, Sink(), headers=headers):
        for ev in batch:
            yield ev
