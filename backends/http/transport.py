"""A lean httpx transport for plain-HTTP/1.1 streaming (``http://`` URLs), built for measurement.

Why: httpx's default transport (httpcore + h11 + anyio) costs ~300 µs of CPU per streamed chunk
here and scans its whole pool on every request, so one client process cannot ingest thousands of
streams (docs/benchmarks.md). This transport keeps the httpx API (``httpx.AsyncClient``,
``Response.aiter_raw``) and the one SSE reader, but reads each connection with an
``asyncio.Protocol``: the body is de-chunked in ``data_received`` and every piece is stamped there
with ``perf_counter_ns()`` -- the first moment Python sees the bytes, before any task wakes up.
The stamp travels on the chunk (``StampedBytes.t_ns``); backends/http/sse.py uses it when present.

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
        self.waiter: asyncio.Future | None = None
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
        t = _perf()
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
        buf = self.cbuf + data if self.cbuf else data
        while buf:
            if self.csize == -1:
                i = buf.find(b"\r\n")
                if i < 0:
                    break
                size = int(buf[:i].split(b";")[0], 16)
                buf = buf[i + 2:]
                if size == 0:  # last chunk (trailers are not used by SSE servers)
                    self.done = True
                    buf = b""
                    break
                self.csize = size
            elif self.csize == -2:
                if len(buf) < 2:
                    break
                buf = buf[2:]
                self.csize = -1
            else:
                piece = buf[: self.csize]
                buf = buf[len(piece):]
                self.csize -= len(piece)
                self._push(piece, t)  # partial chunk data is pushed at once: first-byte stamps
                if self.csize == 0:
                    self.csize = -2
        self.cbuf = buf

    def _push(self, piece: bytes, t: int) -> None:
        if piece:
            b = StampedBytes(piece)
            b.t_ns = t
            self.pieces.append(b)

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)


def _timeout(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(httpx.ReadTimeout("no data within the read timeout"))


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
            c.waiter = c.loop.create_future()
            h = c.loop.call_later(self.read_timeout, _timeout, c.waiter) if self.read_timeout else None
            try:
                await c.waiter
            finally:
                c.waiter = None
                if h is not None:
                    h.cancel()

    async def aclose(self) -> None:
        c = self.conn
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
            return httpx.Response(status, headers=headers, stream=_Body(self, key, conn, tmo.get("read")),
                                  extensions={"http_version": b"HTTP/1.1", "reason_phrase": reason.encode()})

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
