"""Kernel receive timestamps: a client socket whose reads we do ourselves, with ``recvmsg``.

Why: a stamp taken in user space (``perf_counter_ns()`` when Python gets the bytes) includes the
time the process took to wake up and reach the socket -- on a 2-vCPU cloud VM a sleeping
process woken by a loopback write has a p99 of 0.2-2.8 ms before any Python runs, and a busy
client reads some sockets late in a batch (docs/benchmarks.md, HTTP client). Linux stamps every
received packet when it enters the network stack (``SO_TIMESTAMPNS``; for loopback that is in
the sender's own ``send()``), and hands the stamp over with ``recvmsg``. For TCP the kernel
reports, per read, the stamp of the LAST segment the read consumed (``tcp_recvmsg``:
``tcp_update_recv_tstamps`` per skb, last wins) and a segment coalesced into the one before it
in the receive queue carries the newer stamp (``tcp_try_coalesce``: ``to->tstamp =
from->tstamp``). So a read's kernel stamp is the arrival of its newest byte: every event in
the read arrived no later than that, which is the same "upper bound" rule the user-space stamp
follows, minus the wake-up and the client's own lag.

The stamp is CLOCK_REALTIME, moved to the ``perf_counter_ns`` domain with the offset
``time_ns() - perf_counter_ns()`` sampled at each read (the realtime read bracketed by two
monotonic ones; a bracket wider than ``OFFSET_BRACKET_NS`` -- preempted -- keeps the last good
offset); a stamp later than the user-space one (a clock step) is replaced by it. ``rx_ns`` (when
Python read the bytes) travels beside each event so a report can show the client's own lag.

Who reads: a socket read more than one inter-token gap late gives its older event the newer
event's stamp (coalesced segments pass the newer stamp on). Where the native helpers are built,
a receive thread (``_rxthread.c``: epoll + recvmsg without the GIL) reads every watched socket as
data arrives and the event loop drains it in batches (``_Receiver``); ``rx_ns`` is then when that
thread read the bytes. Otherwise (``LLM_COMPARE_RX_THREAD=0``) the event loop reads each socket.

``StampedSocket`` gives ``connection._Conn`` the few transport methods it uses over a
non-blocking socket (uvloop/asyncio transports drop the ancillary data); without the option
(not Linux) or with ``LLM_COMPARE_RX_CLOCK=user`` connections are ordinary asyncio transports.
Known streams (OpenAI, TGI) are parsed by the receive thread itself (``_fastsse.h``): Python sees
the response head and then its records once, at the end (``LLM_COMPARE_RX_PARSE=0``: Python
parses every event).
"""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import sys
import time
from typing import Any

from backends.http import native

_perf = time.perf_counter_ns
_time_ns = time.time_ns

# SO_TIMESTAMPNS: not exported by Python's socket module; 35 on Linux (asm-generic/socket.h, 64-bit)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
_TS = struct.Struct("@qq")  # struct timespec (64-bit time_t)
ANC_SPACE = socket.CMSG_SPACE(_TS.size) if hasattr(socket, "CMSG_SPACE") else 0
READ_BYTES = 64 * 1024  # per recvmsg (256 KiB went through mmap/munmap: ~16 us per read)

CLOCK_ENV = "LLM_COMPARE_RX_CLOCK"  # auto (kernel stamps where available) | user
THREAD_ENV = "LLM_COMPARE_RX_THREAD"  # 1 (the receive thread where built) | 0 (the event loop reads)
PARSE_ENV = "LLM_COMPARE_RX_PARSE"  # 1 (the receive thread parses known streams) | 0 (Python parses every event)
CHAIN_ENV = "LLM_COMPARE_RX_CHAIN"  # 1 (the thread sends a closed loop's next request) | 0 (Python sends every one)
KERNEL_CLOCK = "kernel: SO_TIMESTAMPNS socket receive time -> perf_counter_ns"

# recvmsg(n) allocates n bytes per call: one reused buffer (the GIL serialises readers), a copy of what came
_RBUF = bytearray(READ_BYTES)
_RVIEW = memoryview(_RBUF)
_RBUFS = [_RVIEW]
_supported: bool | None = None
_recv_stamped = native.recv_stamped


def kernel_stamps() -> bool:
    """Whether new connections should read kernel receive stamps (probed once per process)."""
    global _supported
    choice = os.environ.get(CLOCK_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "user"):
        from core.errors import UserError
        raise UserError(f"{CLOCK_ENV}={choice!r} is not one of auto, user (unset it for kernel stamps "
                        f"where available)")
    if choice == "user":
        return False
    if _supported is None:
        _supported = False
        if SO_TIMESTAMPNS is not None and ANC_SPACE and _TS.size == 16 and hasattr(socket.socket, "recvmsg"):
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                    _supported = s.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS) == 1
            except OSError:
                pass
    return _supported


OFFSET_BRACKET_NS = 4000


# A write (Python's or the receive thread's send) takes tens of microseconds. Stamps taken around
# it further apart than this mean the writer lost its CPU in between -- on a loaded host, right
# after the send woke the server: the stamp after it then lands after the response has begun
# (a negative TTFT was measured so, 87 ms late on a 2-core machine running two engines).
SEND_BRACKET_NS = 1_000_000


def send_stamp(before_ns: int, after_ns: int, counts: "ReadCounts | None" = None) -> tuple[int, int]:
    """(when a request's bytes left, the window they left in): right after the write and 0, unless
    the writer was preempted around it (``SEND_BRACKET_NS``); then right before it, as vLLM's
    benchmark client stamps every request (the bytes left somewhere in between, so the TTFT is not
    understated), and the window's length, which the request's record keeps. ``counts``
    (``ReadCounts``) counts those for run.json."""
    if after_ns - before_ns <= SEND_BRACKET_NS:
        return after_ns, 0
    if counts is not None:
        counts.sends_preempted += 1
    return before_ns, after_ns - before_ns


class ReadCounts:
    """Kernel-stamped vs user-stamped reads, and the last good realtime - monotonic offset (per pool)."""

    __slots__ = ("kernel", "user", "off", "delay_max", "parsed", "chained", "sends_preempted")

    def __init__(self) -> None:
        self.kernel = self.user = 0
        self.parsed = [0, 0, 0, 0]  # responses the receive thread parsed: [-, ended, handed back, cut short]
        self.chained = 0  # requests the receive thread sent as the previous one on their connection ended
        self.sends_preempted = 0  # sends stamped before the write (send_stamp)
        self.off = _offset()
        # the longest a kernel-stamped read waited in the socket (ns): under one inter-token gap, no two events shared a read
        self.delay_max = 0


def _offset() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC, from the tightest of a few bracketed samples."""
    best = (1 << 62, 0)
    for _ in range(5):
        a, r, b = _perf(), _time_ns(), _perf()
        best = min(best, (b - a, r - (a + b) // 2))
    return best[1]


class _Receiver:
    """The receive thread of one event loop (``native.RxThread``) and the loop's drain of it."""

    __slots__ = ("loop", "rx", "socks")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.rx = native.RxThread()
        self.socks: dict[int, StampedSocket] = {}  # RxThread key -> socket
        loop.add_reader(self.rx.fileno(), self._drain)

    def _drain(self) -> None:
        socks = self.socks
        for rec in self.rx.drain():
            s = socks.get(rec[0])
            if s is None:  # closed after the thread read it: dropped with the socket
                continue
            if s.hold is not None:  # a chained request's response, before its reader took the connection
                s.hold.append(rec)
                continue
            _dispatch(s, rec)
            x = rec[4]
            if x is not None and x is not True and x[20] > 0:
                s.hold = []  # the thread sent the chained request: what follows is its response

    def add(self, s: "StampedSocket") -> int:
        self.socks[key := self.rx.add(s.fd)] = s
        return key

    def remove(self, key: int) -> None:
        self.rx.remove(key)  # after this the thread never reads that fd number again
        self.socks.pop(key, None)

    def close(self) -> None:
        try:
            if not self.loop.is_closed():
                self.loop.remove_reader(self.rx.fileno())
        finally:
            self.rx.close()


def _dispatch(s: "StampedSocket", rec: tuple) -> None:
    """One record of the receive thread: x None a read; True a read ending a head; else a response's records."""
    _, data, t, u, x = rec
    try:
        if x is None or x is True:
            s._on_read(data, t, u)
            if x:  # the head ended in this read: the thread parses the body
                s.protocol.fast_body()
        else:
            s.counts.parsed[x[0]] += 1
            s.protocol.fast_result(x)
    except Exception as e:  # never into the loop: the other sockets' reads of this drain
        s._fail(e)          # would be lost; only this connection fails


_receiver: _Receiver | None = None


def thread_wanted() -> bool:
    return native.RxThread is not None and os.environ.get(THREAD_ENV, "1").strip() != "0"


def receiver(loop: asyncio.AbstractEventLoop) -> _Receiver | None:
    """The running loop's receive thread (started on first use), or None: the loop reads."""
    global _receiver
    if not thread_wanted():
        return None
    r = _receiver
    if r is not None and r.loop is not loop:
        if not r.loop.is_closed() and r.loop.is_running():
            return None  # another loop (another thread) uses it: this one reads its own sockets
        r.close()  # a finished loop's thread
        r = _receiver = None
    if r is None:
        try:
            r = _receiver = _Receiver(loop)
        except OSError:  # no thread / epoll / eventfd to be had (limits): the loop reads, as without the build
            return None
    return r


def reader_name() -> str:
    """Who reads the sockets, for run.json (``describe().extra.event_clock``)."""
    if not thread_wanted():
        return "event loop (loop.add_reader per socket)"
    prio = f", {_receiver.rx.priority()}" if _receiver is not None else ""
    return f"receive thread (epoll + recvmsg outside the GIL, rounds 250 us apart; the loop drains it{prio})"


class StampedSocket:
    """A connected non-blocking TCP socket driving an ``asyncio.Protocol``-like object.

    Reads: ``protocol.received(data, t_ns, rx_ns)`` with ``t_ns`` the kernel stamp of the read
    (``rx_ns`` when the read carried none) and ``rx_ns`` = perf_counter_ns right after the read.
    Writes: straight ``send``; what the socket does not take is kept and sent on writability.
    ``connection_lost`` is called once, soon after close / EOF / a socket error, as asyncio does."""

    __slots__ = ("loop", "sock", "fd", "protocol", "closing", "wbuf", "counts", "recv", "key", "hold")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Any,
                 counts: ReadCounts) -> None:
        self.loop, self.sock, self.protocol, self.counts = loop, sock, protocol, counts
        self.fd = sock.fileno()
        self.closing = False
        self.wbuf = bytearray()
        self.hold: list[tuple] | None = None  # the thread's records kept for a chained request's reader
        protocol.connection_made(self)
        self.recv = receiver(loop)
        if self.recv is not None:
            self.key = self.recv.add(self)
        else:
            self.key = 0
            loop.add_reader(self.fd, self._read_native if _recv_stamped is not None else self._read)

    def _on_read(self, data: bytes | None, t: int, u: int) -> None:
        """One read (receive thread or C read): ``data`` (b"": EOF; None: the read failed, errno ``t``)."""
        if data is None:
            self._fail(OSError(t, os.strerror(t)))
            return
        if not data:
            self.close()
            return
        c = self.counts
        if t < u:
            c.kernel += 1
            if u - t > c.delay_max:
                c.delay_max = u - t
        else:
            c.user += 1
        self.protocol.received(data, t, u)

    def _read_native(self) -> None:
        """``_read`` with recvmsg, cmsg and clocks in C (backends/http/_native.c): same stamps."""
        try:
            data, t, u = _recv_stamped(self.fd, READ_BYTES)  # type: ignore[misc]
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        self._on_read(data, t, u)

    def _read(self) -> None:
        try:
            n, anc, _, _ = self.sock.recvmsg_into(_RBUFS, ANC_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        u = _perf()  # when Python got the bytes (the user-space stamp)
        data = _RVIEW[:n].tobytes()
        if not data:
            self.close()  # EOF: the server closed (asyncio's default for a protocol without eof_received)
            return
        t = u
        if anc:
            c = self.counts
            r = _time_ns()
            b = _perf()
            if b - u < OFFSET_BRACKET_NS:  # else preempted between the calls: keep the last offset
                c.off = r - ((u + b) >> 1)
            sec, ns = _TS.unpack_from(anc[0][2])
            k = sec * 1_000_000_000 + ns - c.off
            if k < u:
                t = k
                c.kernel += 1
                if u - k > c.delay_max:
                    c.delay_max = u - k
            else:  # (a clock step inside the read)
                c.user += 1
        else:  # a segment queued before the option took effect, or the stack did not stamp it
            self.counts.user += 1
        self.protocol.received(data, t, u)

    # ------------------------------------------------------------ the receive thread parses the body
    def expect(self, fmt: int) -> int:
        """The receive thread parses the next response (``_fastsse.h`` format ``fmt``); before the
        write. Its number (0: Python parses it), for ``take`` and ``last_read``."""
        if self.recv is None or self.closing or os.environ.get(PARSE_ENV, "1").strip() == "0":
            return 0
        return self.recv.rx.expect(self.fd, self.key, fmt)

    def take(self, seq: int) -> tuple | None:  # what the thread parsed of response ``seq`` so far (it stops)
        return None if self.recv is None or self.closing else self.recv.rx.take(self.fd, self.key, seq)

    def last_read(self, seq: int) -> int:  # perf_counter_ns of the thread's last read of response ``seq`` (0: none)
        return 0 if self.recv is None or self.closing else self.recv.rx.last(self.fd, self.key, seq)

    def chain(self, fmt: int, wire: bytes) -> bool:
        """The thread writes ``wire`` the moment the response it parses ends cleanly (_rxthread.c)."""
        return (self.recv is not None and not self.closing and os.environ.get(CHAIN_ENV, "1").strip() != "0"
                and self.recv.rx.chain(self.fd, self.key, fmt, wire))

    def release(self) -> None:
        """The chained request's reader took the connection: the records held for it, in order."""
        held, self.hold = self.hold or [], None
        for rec in held:
            if self.closing:
                return
            _dispatch(self, rec)

    # ------------------------------------------------------------ the transport methods _Conn uses
    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if not self.wbuf:
            try:
                n = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as e:
                self._fail(e)
                return
            if n == len(data):
                return
            data = data[n:]
            self.loop.add_writer(self.fd, self._write_more)
        self.wbuf += data

    def _write_more(self) -> None:
        try:
            n = self.sock.send(self.wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        del self.wbuf[:n]
        if not self.wbuf:
            self.loop.remove_writer(self.fd)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:  # (asyncio's transport.close)
        self._shut(None)

    def _shut(self, exc: Exception | None) -> None:
        if self.closing:
            return
        self.closing = True
        if self.recv is not None:
            self.recv.remove(self.key)  # before close(): the fd number may be reused at once
        else:
            self.loop.remove_reader(self.fd)
        if self.wbuf:
            self.loop.remove_writer(self.fd)
            self.wbuf.clear()
        self.sock.close()
        self.loop.call_soon(self.protocol.connection_lost, exc)

    _fail = _shut  # a socket error: the connection is lost with it
