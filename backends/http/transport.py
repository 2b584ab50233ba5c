"""A lean HTTP/1.1 client for plain-``http://`` streaming, built for measurement: pool and requests.

Why: httpx's default transport (httpcore + h11 + anyio) costs ~300 µs of CPU per streamed chunk
and scans its whole pool on every request, and even with a lean transport httpx's per-request
machinery (request building, URL merging, cookies, auth/redirect wrappers) and one task wake-up
per event cost most of the client's core at thousands of streams (docs/benchmarks.md, HTTP client).

Connections are ``connection._Conn`` protocols that parse events on arrival (stamp, de-chunk,
the shared ``SseFramer``, the protocol's parser into the response's sink) and wake the reader
only per batch, at the end, on an error or a slow flush tick, so a stream of 50 events costs ~3
task wake-ups instead of 50.

Two ways in, one request path (``_send``): ``StreamingTransport`` is an httpx transport (probes,
metrics; the reader drives it through the response extension ``sse.EVENTS_EXTENSION``), and
``StreamingTransport.poster`` sends streaming POSTs straight from prebuilt header bytes on the
same pooled connections, skipping httpx's per-request work (what ``HttpStreamBackend`` uses for
``http://``). Faults are httpx's own exceptions (ConnectError, ConnectTimeout, ReadTimeout,
RemoteProtocolError) on both ways, so ``sse.read_events`` maps them to the same error kinds.
``https://`` is not handled here (httpx's own transport, same framer, sink and parsers).
"""
from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import Any, AsyncIterator, Awaitable, Callable

import httpx

from backends.http import connection, native, rxstamp
from backends.http.connect import hold_stamping_on, open_stamped
from backends.http.connection import StampedBytes, _Conn  # noqa: F401 (StampedBytes: re-exported)
from backends.http.sse import EVENTS_EXTENSION, Sink
from core.records import Lane, RequestContext

_perf = time.perf_counter_ns

try:  # request bodies: msgspec encodes ~5x faster than json.dumps (same JSON)
    from msgspec.json import encode as _dumps
except ImportError:  # pragma: no cover
    def _dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


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


class Chain:
    """A closed-loop stream's next request, sent by the receive thread the moment this one's response
    ends (``_rxthread.c`` chain): set on the sink by ``HttpStreamBackend.stream`` from the executor's
    ``Lane``. ``rid``: this request; ``payload_of(request)``: the next one's JSON payload."""

    __slots__ = ("lane", "rid", "payload_of")

    def __init__(self, lane: Lane, rid: str, payload_of: Callable[[Any], dict[str, Any]]) -> None:
        self.lane, self.rid, self.payload_of = lane, rid, payload_of

    def claimable(self) -> _Conn | None:
        """The connection this request already left on (the thread sent it), if it did."""
        h, self.lane.sent_on = self.lane.sent_on, None
        return h.conn if isinstance(h, _Handed) and h.rid == self.rid and h.left() and h.conn.tr is not None else None

    def arm(self, conn: _Conn, fast: int, frame: Callable[[dict[str, Any]], bytes]) -> None:
        """Hand the next request to the thread for ``conn`` (which just sent this one)."""
        nxt = self.lane.take_next()
        if nxt is None:
            return
        try:
            wire = frame(self.payload_of(nxt))
        except ValueError:  # a prompt the protocol refuses: its own send reports it
            return
        if conn.tr.chain(fast, wire):  # type: ignore[union-attr]
            conn.chain_rid = nxt.request_id
            self.lane.sent_on = _Handed(nxt.request_id, conn)


class _Handed:
    """A request handed to the receive thread for ``conn`` (``Lane.sent_on``); ``left()`` once the
    response before it has ended: whether the thread sent it."""

    __slots__ = ("rid", "conn")

    def __init__(self, rid: str, conn: _Conn) -> None:
        self.rid, self.conn = rid, conn

    def left(self) -> bool:
        return self.conn.chained is not None and self.conn.chained[0] == self.rid


class _Body(httpx.AsyncByteStream):
    def __init__(self, transport: "StreamingTransport", key: tuple[str, int], conn: _Conn, read_timeout: float | None):
        self.transport, self.key, self.conn, self.read_timeout = transport, key, conn, read_timeout

    async def __aiter__(self) -> AsyncIterator[bytes]:
        c = self.conn
        while True:
            while c.pieces:
                yield c.pieces.popleft()
            if c.broken is not None:
                raise c.broken
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
        if c.chained is not None and c.tr is not None:  # the next request is in flight on it: its reader claims it
            self.transport._chained.add(c)
        elif c.done and c.keep_alive and not c.lost and c.tr is not None and not c.pieces:
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
        self._chained: set[_Conn] = set()  # connections a chained request left on, until claimed
        # event stamps: the kernel's receive time where the platform gives it (rxstamp.py)
        self.kernel_stamps = rxstamp.kernel_stamps()
        if self.kernel_stamps:
            hold_stamping_on()  # before the first connection (connect.py says why)
        self._reads = rxstamp.ReadCounts()

    def clock(self) -> dict[str, Any]:
        """Which clock stamped the events (run.json, via the backend's describe()): the source,
        and how many socket reads carried a kernel stamp vs fell back to the user-space one."""
        if not self.kernel_stamps:
            return {"source": connection.USER_CLOCK, "native": native.status}
        return {"source": rxstamp.KERNEL_CLOCK, "kernel_stamped_reads": self._reads.kernel,
                "user_stamped_reads": self._reads.user, "native": native.status,
                "reader": rxstamp.reader_name(),
                # longest wait of a read in its socket: under one inter-token gap, no event shared
                # its read (and stamp) with the next event of its stream
                "read_delay_max_ms": round(self._reads.delay_max / 1e6, 3),
                # responses the receive thread parsed (_fastsse.h): whole, handed back to Python, cut short
                "thread_parsed": dict(zip(("ended", "handed_back", "cut_short"), self._reads.parsed[1:])),
                # closed loop: requests the thread sent the moment their stream's previous response ended
                "thread_sent": self._reads.chained,
                # sends whose writer lost its CPU around the write: stamped before it (send_stamp)
                "sends_preempted": self._reads.sends_preempted}

    async def _connect(self, key: tuple[str, int], timeout: float | None) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                if self.kernel_stamps:
                    conn = _Conn()
                    await open_stamped(loop, key[0], key[1], conn, self._reads)
                else:
                    _, conn = await loop.create_connection(_Conn, key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {key[0]}:{key[1]} timed out") from None
        except OSError as e:
            raise httpx.ConnectError(f"{e.strerror or e} ({key[0]}:{key[1]})") from None
        return conn

    async def _send(self, key: tuple[str, int], wire: bytes, connect_s: float | None,
                    read_s: float | None, fast: int = 0, chain: Chain | None = None,
                    frame: Callable[[dict[str, Any]], bytes] | None = None, ctx: RequestContext | None = None,
                    ) -> tuple[_Body, int, str, list[tuple[bytes, bytes]]]:
        """THE request path of both ways in: send ``wire`` on a pooled connection, await the head.

        The read timeout (head, then body) is the connection's one watchdog timer, armed here
        and kept for the response; it also ticks the slow flush (``connection.FLUSH_S``).
        ``chain`` (closed loop, receive thread): this request may already have left (the thread
        sent it when the stream's previous response ended); the next one is handed over here."""
        claimed = chain.claimable() if chain is not None else None
        if claimed is None:  # (already sent: nothing to pace)
            await self._pacer.turn()
        fresh_only = False
        flush_s = connection.FLUSH_S
        tick = min(read_s, flush_s) if read_s else flush_s
        while True:
            if claimed is not None:
                conn, reused, claimed = claimed, True, None
                self._chained.discard(conn)
                conn.claim(wire)  # its send stamp is the thread's
                parsed = fast  # (the thread parses its response, as it did the one before)
            else:
                conn, reused = (await self._connect(key, connect_s), False) if fresh_only \
                    else await self._checkout(key, connect_s)
                if conn.tr is None:  # closed between connect and now
                    if reused:
                        fresh_only = True
                        continue
                    raise httpx.RemoteProtocolError("server closed the connection before the request was sent")
                parsed = fast and getattr(conn.tr, "expect", None) is not None and conn.tr.expect(fast)
                conn.fast_seq = parsed or 0
                t0 = _perf()
                conn.tr.write(wire)  # (expect before the write: no byte of the response is missed)
                # the send stamp: when the bytes left (a late request's wait is not the server's
                # time); the read timeout counts from the request too
                conn.sent_ns, conn.send_window_ns = rxstamp.send_stamp(t0, _perf(), self._reads)
                conn.rx_ns = conn.sent_ns
            if parsed and chain is not None and frame is not None:
                chain.arm(conn, fast, frame)
            if ctx is not None:  # the consumer's send stamp
                ctx.sent_ns, ctx.send_window_ns = conn.sent_ns, conn.send_window_ns
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
               read_s: float | None) -> Callable[..., Awaitable[_Response]]:
        """``post(path, payload[, fast, chain, ctx])`` for streaming requests: JSON POST to
        ``base_url + path`` with ``headers`` (the client's, Host added), written from header bytes
        built once here; ``ctx`` (core.records.RequestContext) gets the send stamp."""
        url = httpx.URL(base_url)
        if url.scheme != "http":
            raise ValueError(f"poster handles http:// only, not {url.scheme}://")
        key = (url.host, url.port or 80)
        prefix = url.raw_path.rstrip(b"/")
        fixed = {k.lower(): v for k, v in headers.raw if k.lower() not in (b"host", b"content-length", b"content-type")}
        common = b"host: %b\r\n" % url.netloc + b"".join(b"%b: %b\r\n" % kv for kv in fixed.items()) \
            + b"content-type: application/json\r\n"
        send = self._send

        def wire_of(path: bytes, payload: dict[str, Any]) -> bytes:
            body = _dumps(payload)
            return b"POST %b%b HTTP/1.1\r\n%bcontent-length: %d\r\n\r\n%b" % (prefix, path, common, len(body), body)

        async def post(path: str, payload: dict[str, Any], fast: int = 0, chain: Chain | None = None,
                       ctx: RequestContext | None = None) -> _Response:
            p = path.encode()
            stream, status, _, hdrs = await send(key, wire_of(p, payload), connect_s, read_s, fast, chain,
                                                 (lambda pl: wire_of(p, pl)) if chain is not None else None, ctx)
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
        for c in self._chained:  # a chained request nobody read (the level stopped)
            if c.tr is not None:
                c.tr.close()
        self._chained.clear()
        for conns in self._idle.values():
            for c in conns:
                if c.tr is not None:
                    c.tr.close()
        self._idle.clear()
