"""A lean httpx transport for plain-HTTP/1.1 streaming (``http://`` URLs), built for measurement.

Why: httpx's default transport (httpcore + h11 + anyio) costs ~300 µs of CPU per streamed chunk
here and scans its whole pool on every request, so one client process cannot ingest thousands of
streams (docs/benchmarks.md). This transport keeps the httpx API (``httpx.AsyncClient``,
``Response.aiter_raw``) and the one SSE reader, but reads each connection with an
``asyncio.Protocol``: the body is de-chunked in ``data_received`` and every piece is stamped there
with ``perf_counter_ns()`` -- the first moment Python sees the bytes, before any task wakes up.
Once the SSE reader asks for events (response extension ``sse.EVENTS_EXTENSION``), the pieces
go through the shared ``SseFramer`` right there, and one wake-up hands the reader every event
that arrived meanwhile (no bytes chunk per event through httpx's stream wrappers). Raw bytes
(``aiter_raw``/``aread``) carry their stamp as ``StampedBytes.t_ns``.

Faults are raised as httpx's own exceptions (ConnectError, ConnectTimeout, ReadTimeout,
RemoteProtocolError), so error mapping is the same for both transports. ``https://`` is not
handled here (HttpStreamBackend then uses httpx's default transport).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import AsyncIterator

import httpx

from backends.http.sse import EVENTS_EXTENSION, RawEvent, SseFramer

_perf = time.perf_counter_ns


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
        self.pieces: deque[StampedBytes] = deque()
        # set once the reader asks for events: body bytes are then framed as they arrive
        self.framer: SseFramer | None = None
        self.waiter: asyncio.Future | None = None
        self.watchdog: asyncio.TimerHandle | None = None
        self.rx_ns = _perf()  # last time bytes arrived (the read timeout counts from here)
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
        if self.csize == -1 and not self.cbuf and self.framer is not None:
            # the usual read: exactly one whole chunk (one SSE event) -> straight to the framer
            i = data.find(b"\r\n")
            if i > 0 and b";" not in data[:i]:
                size = int(data[:i], 16)
                end = i + 2 + size
                if size and len(data) == end + 2 and data[end:] == b"\r\n":
                    self.framer.feed(data[i + 2:end], t)
                    return
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
            self.watchdog = self.loop.call_later(read_timeout, self._watch, read_timeout)
        try:
            await self.waiter
        finally:
            self.waiter = None

    def _watch(self, read_timeout: float) -> None:
        """One timer per response, re-armed lazily (not one per wait: that cost a timer per event)."""
        self.watchdog = None
        if self.done or self.lost:
            return
        idle_s = (_perf() - self.rx_ns) / 1e9
        w = self.waiter
        if w is None or w.done():  # the reader is busy, not waiting: look again later
            self.watchdog = self.loop.call_later(read_timeout, self._watch, read_timeout)
        elif idle_s >= read_timeout:
            w.set_exception(httpx.ReadTimeout("no data within the read timeout"))
        else:
            self.watchdog = self.loop.call_later(read_timeout - idle_s, self._watch, read_timeout)

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

    async def next_events(self) -> list[RawEvent]:
        """Every SSE event that arrived since the last call (waits for one); [] at the end.

        Served as a response extension (sse.EVENTS_EXTENSION): one wake-up hands the reader all
        events framed in ``data_received``, instead of one bytes chunk through httpx's wrappers."""
        c = self.conn
        f = c.framer
        if f is None:  # first call: from now on bytes are framed on arrival; earlier ones keep their stamps
            f = c.framer = SseFramer()
            while c.pieces:
                p = c.pieces.popleft()
                f.feed(p, p.t_ns)
        while True:
            if f.events:
                return f.take()
            if c.done:
                f.close()  # raises if the body ended inside an event
                return []
            if c.lost:
                raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
            # c.wait(), inlined: this runs once per streamed event
            c.waiter = c.loop.create_future()
            if self.read_timeout and c.watchdog is None:
                c.watchdog = c.loop.call_later(self.read_timeout, c._watch, self.read_timeout)
            try:
                await c.waiter
            finally:
                c.waiter = None

    async def aclose(self) -> None:
        c = self.conn
        c.stop_watch()
        if c.done and c.keep_alive and not c.lost and c.tr is not None and not c.pieces:
            c.reset()
            self.transport._idle.setdefault(self.key, []).append(c)
        elif c.tr is not None:
            c.tr.close()


class StreamingTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 over asyncio.Protocol; one request per connection at a time."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Conn]] = {}

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

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"StreamingTransport handles http:// only, not {url.scheme}://")
        key = (url.host, url.port or 80)
        tmo = request.extensions.get("timeout", {})
        body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), url.raw_path)]
        head += [b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw]
        wire = b"".join(head) + b"\r\n" + body
        fresh_only = False
        while True:
            conn, reused = (await self._connect(key, tmo.get("connect")), False) if fresh_only \
                else await self._checkout(key, tmo.get("connect"))
            if conn.tr is None:  # closed between connect and now
                if reused:
                    fresh_only = True
                    continue
                raise httpx.RemoteProtocolError("server closed the connection before the request was sent")
            conn.tr.write(wire)
            try:
                async with asyncio.timeout(tmo.get("read")):
                    status, reason, headers = await conn.head
            except TimeoutError:
                conn.tr and conn.tr.close()
                raise httpx.ReadTimeout("no response head within the read timeout") from None
            except httpx.RemoteProtocolError:
                # A reused keep-alive connection the server closed just as we wrote (its idle
                # timeout raced our request): nothing was processed, so send once more on a
                # new connection. A new connection failing is the server's answer: raise.
                if reused:
                    fresh_only = True
                    continue
                raise
            body_stream = _Body(self, key, conn, tmo.get("read"))
            return httpx.Response(status, headers=headers, stream=body_stream,
                                  extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode(),
                                              EVENTS_EXTENSION: body_stream.next_events})

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
