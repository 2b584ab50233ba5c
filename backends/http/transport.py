"""A lean HTTP/1.1 client for plain-``http://`` streaming, built for measurement.

Why: httpx's default transport (httpcore + h11 + anyio) costs ~300 µs of CPU per streamed chunk
and scans its whole pool on every request, and even with a lean transport httpx's per-request
machinery (request building, URL merging, cookies, auth/redirect wrappers) and one task wake-up
per event cost most of the client's core at thousands of streams (docs/benchmarks.md, issue 3).

Each connection is an ``asyncio.Protocol``. In ``data_received`` -- the first moment Python sees
the bytes -- a piece is stamped with ``perf_counter_ns()``, de-chunked, framed by the shared
``SseFramer`` and parsed by the protocol's parser into the response's sink
(``sse.Sink`` / ``protocol.EventSink``), all before any task wakes up. The reader is woken only
when the sink holds a full batch, the body ended, an error came, or on a slow flush tick
(``flush_s``), so a stream of 50 events costs ~2 task wake-ups instead of 50.

Two ways in, one connection code: ``StreamingTransport`` is an httpx transport (probes, metrics,
https-free httpx use; the reader drives it through the response extension
``sse.EVENTS_EXTENSION``), and ``StreamingTransport.poster`` sends streaming POSTs straight
from prebuilt header bytes on the same pooled connections, skipping httpx's per-request work
(what ``HttpStreamBackend`` uses for ``http://``). Faults are httpx's own exceptions
(ConnectError, ConnectTimeout, ReadTimeout, RemoteProtocolError) on both ways, so
``sse.read_events`` maps them to the same error kinds. ``https://`` is not handled here.
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx

from backends.http.sse import EVENTS_EXTENSION, SseFramer, Sink

_perf = time.perf_counter_ns

try:  # request bodies: msgspec encodes ~5x faster than json.dumps (same JSON)
    from msgspec.json import encode as _dumps
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

# A reader waiting on a batch sees buffered events at least this often. Nothing in the executor
# needs events sooner (stream end always wakes it; timeouts hand over what was buffered), and each
# flush is a task wake-up per stream: 0.5 s cost ~0.6 us/event at 2000 streams of 2 s.
FLUSH_S = 1.0


class _Pacer:
    """At most one request leaves per event-loop iteration; the loop reads sockets in between.

    Why: a closed-loop level starts all its streams at once. 2000 connects + request writes in
    one loop iteration kept the loop from reading any socket for ~200 ms, so every event that
    arrived meanwhile (the first events of the first streams) carried that as timing error.
    Released one per iteration, the same requests leave over about the same time, but no event
    waits longer than one request's worth of work. Costs nothing when requests do not pile up."""

    def __init__(self) -> None:
        self.free = True  # no request has left in this iteration yet
        self.waiting: deque[asyncio.Future] = deque()
        self.ticking = False

    async def turn(self) -> None:
        if self.free and not self.waiting:
            self.free = False
            self._tick_soon()
            return
        f = asyncio.get_running_loop().create_future()
        self.waiting.append(f)
        self._tick_soon()
        await f

    def _tick_soon(self) -> None:
        if not self.ticking:
            self.ticking = True
            asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:  # runs once per loop iteration while requests are leaving
        self.ticking = False
        self.free = True
        while self.waiting:
            f = self.waiting.popleft()
            if not f.done():  # (a cancelled waiter is skipped)
                f.set_result(None)
                self.free = False
                break
        if not self.free:
            self._tick_soon()


class StampedBytes(bytes):
    """Body bytes + ``t_ns``: perf_counter_ns when they were received."""

    t_ns: int


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.tr: asyncio.Transport | None = None
        self.reset()

    def reset(self) -> None:
        self.head_buf = b""
        self.head: asyncio.Future = self.loop.create_future()
        self.in_head = True
        self.mode = "close"  # chunked | length | close
        self.remaining = 0
        self.cbuf = b""
        self.csize = -1  # -1: expecting a size line; -2: expecting the CRLF after chunk data
        self.pieces: deque[StampedBytes] = deque()  # body bytes before a sink is attached
        # set once the reader attaches a sink: body bytes are then framed + parsed as they arrive
        self.framer: SseFramer | None = None
        self.sink: Sink | None = None
        self.waiter: asyncio.Future | None = None
        self.watchdog: asyncio.TimerHandle | None = None
        self.rx_ns = _perf()  # last time bytes arrived (the read timeout counts from here)
        self.flush = False  # the slow flush tick asked the reader to take what is buffered
        self.cancel_next = False  # a cancellation was deferred to hand over buffered events
        self.done = False
        self.lost = False
        self.keep_alive = True

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tr = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.tr = None
        if not self.head.done():
            self.head.set_exception(httpx.RemoteProtocolError("server closed the connection before answering"))
            self.head.exception()  # idle keep-alive connections close unobserved: not an error to log
        if self.mode == "close" and not self.in_head:
            self.done = True
        self._wake()

    def data_received(self, data: bytes) -> None:
        # THE stamp: the first moment Python sees these bytes, before any parsing or task wake-up
        self.rx_ns = t = _perf()
        f = self.framer
        if f is not None and self.csize == -1 and not self.cbuf and self.mode == "chunked":
            # the usual read: exactly one whole chunk (one SSE event) -> straight to the framer
            i = data.find(b"\r\n")
            if 0 < i < 9:
                try:
                    size = int(data[:i], 16)
                except ValueError:  # a chunk extension (";..."): the general path below
                    size = 0
                end = i + 2 + size
                if size and len(data) == end + 2 and data.endswith(b"\r\n"):
                    f.feed(data[i + 2:end], t)
                    if self.sink.ready:  # type: ignore[union-attr]
                        self._wake()
                    return
        if self.in_head:
            self.head_buf += data
            i = self.head_buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head, data = self.head_buf[:i], self.head_buf[i + 4:]
            self.in_head = False
            self._parse_head(head)
            if self.done or not data:
                self._wake()
                return
        if self.mode == "chunked":
            self._dechunk(data, t)
        elif self.mode == "length":
            piece = data[: self.remaining]
            self.remaining -= len(piece)
            self._push(piece, t)
            self.done = self.remaining == 0
        else:
            self._push(data, t)
        sink = self.sink
        # a raw reader wants every piece; a sink's reader only full batches, errors and the end
        if sink is None or sink.ready or self.done:
            self._wake()

    # ---------------------------------------------------------------- parsing
    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        headers = []
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers.append((k.strip(), v.strip()))
            lk = k.strip().lower()
            if lk == b"transfer-encoding" and b"chunked" in v.lower():
                self.mode = "chunked"
            elif lk == b"content-length" and self.mode != "chunked":
                self.mode, self.remaining = "length", int(v)
            elif lk == b"connection" and b"close" in v.lower():
                self.keep_alive = False
        if self.mode == "close":
            self.keep_alive = False
        if self.mode == "length" and self.remaining == 0:
            self.done = True
        self.head.set_result((int(parts[1]), parts[2].decode("latin-1") if len(parts) > 2 else "", headers))

    def _dechunk(self, data: bytes, t: int) -> None:
        """Chunked transfer coding, incremental; positions instead of re-slicing the buffer."""
        buf = self.cbuf + data if self.cbuf else data
        pos, n, size = 0, len(buf), self.csize
        while pos < n:
            if size == -1:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                size = int(buf[pos:i].partition(b";")[0], 16)
                pos = i + 2
                if size == 0:  # last chunk (trailers are not used by SSE servers)
                    self.done = True
                    pos = n
                    break
            elif size == -2:
                if n - pos < 2:
                    break
                pos += 2
                size = -1
            else:
                end = pos + size if pos + size < n else n
                self._push(buf[pos:end], t)  # partial chunk data is pushed at once: first-byte stamps
                size -= end - pos
                pos = end
                if size == 0:
                    size = -2
        self.csize = size
        self.cbuf = buf[pos:] if pos < n else b""

    def _push(self, piece: bytes, t: int) -> None:
        if piece:
            if self.framer is not None:
                self.framer.feed(piece, t)
                return
            b = StampedBytes(piece)
            b.t_ns = t
            self.pieces.append(b)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    # ---------------------------------------------------------------- the reader's side
    async def wait(self, read_timeout: float | None) -> None:
        """Until bytes arrive or the connection ends; ReadTimeout after ``read_timeout`` s of silence."""
        self.waiter = self.loop.create_future()
        if read_timeout and self.watchdog is None:
            self.watchdog = self.loop.call_later(read_timeout, self._watch, read_timeout, read_timeout)
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def fill(self, sink: Sink, read_timeout: float | None) -> None:
        """Until ``sink`` has a batch for its reader: ready (full batch / error), ended, or flushed.

        Body faults (cut inside an event, connection lost, read timeout) are set on the sink,
        after the events that came before them, so the reader keeps every token received."""
        if self.cancel_next:  # the cancellation deferred below: honour it now
            self.cancel_next = False
            raise asyncio.CancelledError()
        if self.framer is None:  # first call: from now on bytes are framed on arrival; earlier ones keep their stamps
            self.sink = sink
            f = self.framer = SseFramer(sink.push)
            while self.pieces:
                p = self.pieces.popleft()
                f.feed(p, p.t_ns)
        tick = min(read_timeout, FLUSH_S) if read_timeout else FLUSH_S
        while True:
            if sink.ready or sink.ended:
                return
            if self.done:
                try:
                    self.framer.close()  # raises if the body ended inside an event
                except Exception as e:
                    sink.fail(e)
                sink.ended = True
                return
            if self.lost:
                sink.fail(httpx.RemoteProtocolError("peer closed connection without sending complete message body"))
                return
            if self.flush:
                self.flush = False
                if sink.items:
                    return
            w = self.waiter = self.loop.create_future()
            if self.watchdog is None:  # (armed by _send; re-armed here if it was stopped)
                self.watchdog = self.loop.call_later(tick, self._watch, tick, read_timeout)
            try:
                await w
            except asyncio.CancelledError:
                # cancelled (the executor's request timeout, a level stop) with events buffered
                # that arrived before: hand them over first; the reader's next call raises
                if sink.items:
                    self.cancel_next = True
                    return
                raise
            finally:
                self.waiter = None

    def _watch(self, tick: float, read_timeout: float | None) -> None:
        """One timer per response, re-armed each tick (not one per wait: that cost a timer per event).

        Ticks every ``min(read_timeout, flush_s)`` while a sink is attached (flushing buffered
        events to a waiting reader), else every ``read_timeout``; enforces the read timeout."""
        self.watchdog = None
        if self.done or self.lost:
            return
        delay = tick
        if not self.head.done():  # waiting for the response head (_send)
            idle_s = (_perf() - self.rx_ns) / 1e9
            if read_timeout and idle_s >= read_timeout:
                self.head.set_exception(httpx.ReadTimeout("no response head within the read timeout"))
                return
            if read_timeout:
                delay = min(tick, read_timeout - idle_s)
            self.watchdog = self.loop.call_later(delay, self._watch, tick, read_timeout)
            return
        w = self.waiter
        if w is not None and not w.done():
            idle_s = (_perf() - self.rx_ns) / 1e9
            if read_timeout and idle_s >= read_timeout:
                err = httpx.ReadTimeout("no data within the read timeout")
                if self.sink is not None:
                    self.sink.fail(err)  # after the events that arrived before it
                    w.set_result(None)
                else:
                    w.set_exception(err)
                return
            if self.sink is not None and self.sink.items:
                self.flush = True
                w.set_result(None)
            if read_timeout:
                delay = min(tick, read_timeout - idle_s)
        self.watchdog = self.loop.call_later(delay, self._watch, tick, read_timeout)

    def stop_watch(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None


class _Body(httpx.AsyncByteStream):
    def __init__(self, transport: "StreamingTransport", key: tuple[str, int], conn: _Conn, read_timeout: float | None):
        self.transport, self.key, self.conn, self.read_timeout = transport, key, conn, read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        c = self.conn
        while True:
            while c.pieces:
                yield c.pieces.popleft()
            if c.done:
                return
            if c.lost:
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
            await c.wait(self.read_timeout)

    async def fill(self, sink: Sink) -> None:
        """The response extension sse.EVENTS_EXTENSION: events parsed on arrival, in batches."""
        await self.conn.fill(sink, self.read_timeout)

    async def aclose(self) -> None:
        c = self.conn
        c.stop_watch()
        if c.done and c.keep_alive and not c.lost and c.tr is not None and not c.pieces:
            c.reset()
            self.transport._idle.setdefault(self.key, []).append(c)
        elif c.tr is not None:
            c.tr.close()


class _Response:
    """What ``sse.read_events`` reads of a response, without httpx's Response/Headers objects."""

    __slots__ = ("status_code", "headers", "extensions", "_body")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: _Body) -> None:
        self.status_code = status
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers}
        self.extensions = {EVENTS_EXTENSION: body.fill}
        self._body = body

    async def aread(self) -> bytes:
        return b"".join([p async for p in self._body])

    async def aclose(self) -> None:
        await self._body.aclose()


class StreamingTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio.Protocol; one request per connection at a time."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._pacer = _Pacer()

    async def _connect(self, key: tuple[str, int], timeout: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(_Conn, key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {key[0]}:{key[1]} timed out") from None
        except OSError as e:
            raise httpx.ConnectError(f"{e.strerror or e} ({key[0]}:{key[1]})") from None
        return conn

    async def _send(self, key: tuple[str, int], wire: bytes, connect_s: float | None,
                    read_s: float | None) -> tuple[_Body, int, str, list[tuple[bytes, bytes]]]:
        """THE request path of both ways in: send ``wire`` on a pooled connection, await the head.

        The read timeout (head, then body) is the connection's one watchdog timer, armed here
        and kept for the response; it also ticks the slow flush (``FLUSH_S``)."""
        await self._pacer.turn()
        fresh_only = False
        tick = min(read_s, FLUSH_S) if read_s else FLUSH_S
        while True:
            conn, reused = (await self._connect(key, connect_s), False) if fresh_only \
                else await self._checkout(key, connect_s)
            if conn.tr is None:  # closed between connect and now
                if reused:
                    fresh_only = True
                    continue
                raise httpx.RemoteProtocolError("server closed the connection before the request was sent")
            conn.tr.write(wire)
            conn.rx_ns = _perf()  # the read timeout counts from the request
            conn.watchdog = conn.loop.call_later(tick, conn._watch, tick, read_s)
            try:
                status, reason, headers = await conn.head
            except httpx.RemoteProtocolError:
                conn.stop_watch()
                # A reused keep-alive connection the server closed just as we wrote (its idle
                # timeout raced our request): nothing was processed, so send once more on a
                # new connection. A new connection failing is the server's answer: raise.
                if reused:
                    fresh_only = True
                    continue
                raise
            except BaseException:  # read timeout, or cancelled while waiting: the connection is mid-request
                conn.stop_watch()
                conn.tr and conn.tr.close()
                raise
            return _Body(self, key, conn, read_s), status, reason, headers

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"StreamingTransport handles http:// only, not {url.scheme}://")
        tmo = request.extensions.get("timeout", {})
        body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        head += [b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw]
        stream, status, reason, headers = await self._send(
            (url.host, url.port or 80), b"".join(head) + b"\r\n" + body, tmo.get("connect"), tmo.get("read"))
        return httpx.Response(status, headers=headers, stream=stream,
                              extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode(),
                                          EVENTS_EXTENSION: stream.fill})

    def poster(self, base_url: str, headers: httpx.Headers, connect_s: float | None,
               read_s: float | None) -> Callable[[str, dict[str, Any]], Awaitable[_Response]]:
        """``post(path, payload)`` for streaming requests: JSON POST to ``base_url + path`` with
        ``headers`` (the client's, Host added), written from header bytes built once here."""
        url = httpx.URL(base_url)
        if url.scheme != "http":
            raise ValueError(f"poster handles http:// only, not {url.scheme}://")
        key = (url.host, url.port or 80)
        prefix = url.raw_path.rstrip(b"/")
        fixed = {k.lower(): v for k, v in headers.raw if k.lower() not in (b"host", b"content-length", b"content-type")}
        common = b"host: %b\r\n" % url.netloc + b"".join(b"%b: %b\r\n" % kv for kv in fixed.items()) \
            + b"content-type: application/json\r\n"
        send = self._send

        async def post(path: str, payload: dict[str, Any]) -> _Response:
            body = _dumps(payload)
            wire = b"POST %b%b HTTP/1.1\r\n%bcontent-length: %d\r\n\r\n%b" % (
                prefix, path.encode(), common, len(body), body)
            stream, status, _, hdrs = await send(key, wire, connect_s, read_s)
            return _Response(status, hdrs, stream)

        return post

    async def _checkout(self, key: tuple[str, int], timeout: float | None) -> tuple[_Conn, bool]:
        """A live idle connection (dropping every one the server has closed meanwhile), else a new one.

        Servers close idle keep-alive connections (uvicorn after 5 s): between load levels the
        whole pool can go stale, so stale entries are discarded here rather than counted as
        failed attempts (which made requests fail with "no usable connection" at the start of a
        level, seen at 15 and 30 req/s against vLLM's server on the H200).
        """
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.tr is not None and not conn.lost and not conn.tr.is_closing():
                return conn, True
        return await self._connect(key, timeout), False

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for c in conns:
                if c.tr is not None:
                    c.tr.close()
        self._idle.clear()
