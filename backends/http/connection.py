"""One HTTP/1.1 client connection (an ``asyncio.Protocol``) that parses streamed events on arrival.

Each read is stamped -- with the kernel's receive time when the connection is a
``rxstamp.StampedSocket`` (Linux), else with ``perf_counter_ns()`` in ``data_received``, the first
moment Python sees the bytes -- and ``rx_ns`` (when Python read them) travels beside it; the
response head is parsed, the body de-chunked, and, once the reader has attached a sink, framed by
the shared ``SseFramer`` and parsed into that sink (``sse.Sink`` / ``protocol.EventSink``), all
before any task wakes up. ``fill`` wakes the reader only for a full batch, the end of the body, an
error, or a slow flush tick (``FLUSH_S``); the connection's one watchdog timer ticks the flush and
enforces the read timeout (head and body).
Used by backends/http/transport.py (pool, requests); faults are httpx's own exceptions.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque

import httpx

from backends.http.native import frame_chunks as _frame_chunks
from backends.http.rxstamp import send_stamp
from backends.http.sse import RawEvent, SseFramer, Sink, one_line, snippet
from core.errors import BackendRequestError, FailureKind

_perf = time.perf_counter_ns

# A reader waiting on a batch sees buffered events at least this often. Nothing in the executor
# needs events sooner (stream end always wakes it; timeouts hand over what was buffered), and each
# flush is one more task wake-up per stream and tick (at 0.5 s, 3 extra per 2-s stream).
FLUSH_S = 1.0
USER_CLOCK = "user: perf_counter_ns when the event loop handed over the bytes"


class StampedBytes(bytes):
    """Body bytes + ``t_ns`` (their receive stamp) + ``rx_ns`` (when Python read them)."""

    t_ns: int
    rx_ns: int


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.tr: asyncio.Transport | None = None
        self.reset()

    def reset(self) -> None:
        self.sent_ns = self.send_window_ns = 0  # when the request's bytes were written (send_stamp)
        self.head_buf = self.cbuf = b""
        self.head: asyncio.Future = self.loop.create_future()
        self.in_head, self.remaining = True, 0
        self.mode = "close"  # chunked | length | close
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
        self.done = self.lost = False
        self.keep_alive = True
        self.broken: BackendRequestError | None = None  # the response failed to parse (protocol)
        self.fast = False  # the receive thread parses this body (rxstamp.StampedSocket.expect)
        self.fast_seq = 0  # its number there (take/last_read never reach a later, chained response)
        self.fast_res: tuple | None = None  # its records, before the reader attached a sink
        self.chain_rid: str | None = None  # the request the thread writes when this response ends
        # it did: (request id, sent ns, bytes sent, its response's number in the thread, send window)
        self.chained: tuple[str, int, int, int, int] | None = None

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
        # an asyncio transport (no kernel stamp): THE stamp is the first moment Python sees the
        # bytes, before any parsing or task wake-up
        t = _perf()
        self.received(data, t, t)

    def received(self, data: bytes, t: int, u: int) -> None:
        """``data`` read at perf_counter_ns ``u``; ``t``: its receive stamp (the kernel's, or ``u``).

        Total: whatever the server sends, nothing raises into the event loop (or the receive
        thread's drain); a malformed response or event fails this response as a protocol error."""
        if self.broken is not None:
            return  # the response is already failed; the connection is closing
        self.rx_ns = u
        try:
            f = self.framer
            if f is not None and self.csize == -1 and not self.cbuf and self.mode == "chunked":
                if _frame_chunks is not None and not f._buf and not f._cr:
                    # whole chunks of whole events (nearly every read): de-chunked, framed and emitted
                    # in C (backends/http/_native.c); -1: nothing emitted, the Python path below
                    if _frame_chunks(data, t, u, f.emit, RawEvent) >= 0:
                        if self.sink.ready:  # type: ignore[union-attr]
                            self._wake()
                        return
                # the usual read: exactly one whole chunk (one SSE event) -> straight to the framer
                i = data.find(b"\r\n")
                if 0 < i < 9:
                    try:
                        size = int(data[:i], 16)
                    except ValueError:  # a chunk extension (";..."): the general path below
                        size = 0
                    end = i + 2 + size
                    if size and len(data) == end + 2 and data.endswith(b"\r\n"):
                        f.feed(data[i + 2:end], t, u)
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
                self._dechunk(data, t, u)
            elif self.mode == "length":
                piece = data[: self.remaining]
                self.remaining -= len(piece)
                self._push(piece, t, u)
                self.done = self.remaining == 0
            else:
                self._push(data, t, u)
            sink = self.sink
            # a raw reader wants every piece; a sink's reader only full batches, errors and the end
            if sink is None or sink.ready or self.done:
                self._wake()
        except Exception as e:
            self._fault(e, data)

    def _fault(self, e: Exception, data: bytes) -> None:
        """This response cannot be parsed: fail it (head or body) and close the connection."""
        err = e if isinstance(e, BackendRequestError) else BackendRequestError(
            FailureKind.PROTOCOL, f"malformed HTTP response ({type(e).__name__}: {one_line(str(e), 120)}): "
            f"{snippet(data)}")
        self.broken, self.keep_alive = err, False
        if not self.head.done():
            self.head.set_exception(err)
            self.head.exception()  # (an idle connection has no reader to observe it)
        elif self.sink is not None:
            self.sink.fail(err)  # after the events parsed before it
        self._wake()
        if self.tr is not None:
            self.tr.close()

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

    def _dechunk(self, data: bytes, t: int, u: int) -> None:
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
                self._push(buf[pos:end], t, u)  # partial chunk data is pushed at once: first-byte stamps
                size -= end - pos
                pos = end
                if size == 0:
                    size = -2
        self.csize = size
        self.cbuf = buf[pos:] if pos < n else b""

    def _push(self, piece: bytes, t: int, u: int) -> None:
        if piece:
            if self.framer is not None:
                self.framer.feed(piece, t, u)
                return
            b = StampedBytes(piece)
            b.t_ns, b.rx_ns = t, u
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
            if self.fast_res is not None:  # the thread's records come before any later bytes
                sink.add_fast(self.fast_res)  # type: ignore[attr-defined]
                self.fast_res = None
            try:
                while self.pieces:
                    p = self.pieces.popleft()
                    f.feed(p, p.t_ns, p.rx_ns)
            except BackendRequestError as e:  # an event that is not UTF-8
                self.broken = self.broken or e
            if self.broken is not None:
                sink.fail(self.broken)
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
                self._take_fast(sink)
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
        if self.fast and self.tr is not None:  # the thread reads this body: its last read counts
            self.rx_ns = max(self.rx_ns, self.tr.last_read(self.fast_seq))  # type: ignore[attr-defined]
        if w is not None and not w.done():
            idle_s = (_perf() - self.rx_ns) / 1e9
            if read_timeout and idle_s >= read_timeout:
                err = httpx.ReadTimeout("no data within the read timeout")
                if self.sink is not None:
                    self._take_fast(self.sink)
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

    # ---------------------------------------------------------------- the receive thread's body
    def fast_body(self) -> None:
        """The head just parsed; the receive thread parses the body (backends/http/_fastsse.h)."""
        self.fast = not self.in_head and self.mode == "chunked" and self.broken is None

    def _take_fast(self, sink: Sink) -> None:
        """The request ends here (cancelled, read timeout): what the thread parsed so far."""
        if self.fast and self.tr is not None:
            self.fast = False
            res = self.tr.take(self.fast_seq)  # type: ignore[attr-defined]
            if res is not None:
                sink.add_fast(res)  # type: ignore[attr-defined]

    def fast_result(self, res: tuple) -> None:
        """The thread's records of this body: ended (1), bailed (2: Python's path continues from
        the bytes it hands back, with its chunk decoder's state) or cut short (3: EOF follows)."""
        if not self.fast:
            return  # (a response that never reached its body here: nothing was parsed)
        self.fast = False
        status, ended = res[0], res[11]
        if res[20] > 0 and self.chain_rid is not None:  # the next request left (rxstamp holds its reads)
            sent, window = send_stamp(res[24], res[21], self.tr.counts)  # type: ignore[union-attr]
            self.chained = (self.chain_rid, sent, res[20], res[22], window)
        if self.sink is not None:
            self.sink.add_fast(res)  # type: ignore[attr-defined]
        else:
            self.fast_res = res
        try:
            if status == 2:
                pend, pt, pu, rest, rt, ru, csize, cbuf = res[12:20]
                self.csize, self.cbuf = csize, b""
                self._push(pend, pt, pu)
                self._push(rest, rt, ru)
                if ended:
                    self.done = True
                elif cbuf:
                    self._dechunk(cbuf, rt, ru)
            elif status == 1:
                self.done = True
        except Exception as e:
            self._fault(e, res[15] or b"")
            return
        self._wake()

    def claim(self, wire: bytes) -> None:
        """The reader of the request the thread chained (``chained``) takes the connection: a new
        response whose send stamp is the thread's; the rest of ``wire`` if the thread sent part."""
        (_, sent_ns, n, seq, window), counts = self.chained, self.tr.counts  # type: ignore[misc,union-attr]
        self.reset()
        self.sent_ns = self.rx_ns = sent_ns
        self.fast_seq, self.send_window_ns = seq, window
        if n < len(wire):
            t0 = _perf()
            self.tr.write(wire[n:])  # type: ignore[union-attr]
            self.sent_ns, self.send_window_ns = send_stamp(t0, _perf(), counts)
            self.rx_ns = self.sent_ns
        counts.chained += 1
        self.tr.release()  # type: ignore[union-attr]

    def stop_watch(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
