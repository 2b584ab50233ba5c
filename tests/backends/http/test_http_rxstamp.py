"""Kernel receive stamps (backends/http/rxstamp.py) against a real loopback server: an event that
arrives while the client's event loop is blocked keeps the time it ARRIVED (the kernel's stamp),
not the time the loop got around to reading it; the user-space stamp beside it shows the lag
(the event loop reads) or not (the receive thread reads while the loop is blocked). Two events of
one stream arriving during one block keep their own arrival times with the receive thread."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import httpx
import pytest

from backends.http import native, rxstamp
from backends.http.sse import Sink, read_events
from backends.http.transport import StreamingTransport
from core.errors import UserError

BLOCK_S = 0.1  # long enough that a loaded machine still reads (thread) inside it


class OneEventServer:
    """A blocking HTTP/1.1 server in a thread: answers one POST with a chunked event stream; its
    one token event is written (``id:`` = perf_counter_ns just before the write) only once the
    client says its loop is blocked, then the end of the body after the client unblocks."""

    def __init__(self, events: int = 1, gap_s: float = 0.0) -> None:
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.client_blocked = threading.Event()
        self.events, self.gap_s = events, gap_s
        self.sent_ns = 0
        self.sent: list[int] = []
        self.after_ns: list[int] = []  # right after each event's send (its kernel stamp lies between)
        self.unblocked_ns = 0  # when the client's loop ran again
        self.block_s = BLOCK_S + gap_s * max(events - 1, 0)  # how long the client blocks its loop
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.lsock.accept()
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            assert self.client_blocked.wait(10)
            time.sleep(0.005)  # well inside the client's blocked time
            for i in range(self.events):
                if i:
                    time.sleep(self.gap_s)
                self.sent_ns = time.perf_counter_ns()
                self.sent.append(self.sent_ns)
                event = b"id: %d\ndata: {\"x\": 1}\n\n" % self.sent_ns
                conn.sendall(b"%x\r\n%b\r\n" % (len(event), event))
                self.after_ns.append(time.perf_counter_ns())
            time.sleep(self.block_s + 0.03)  # the client has read the events by now
            end = b"data: [DONE]\n\n"
            conn.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(end), end))
            conn.recv(1)  # until the client closes

    def close(self) -> None:
        self.lsock.close()
        self.thread.join(5)


async def _one_stream(url: str) -> tuple[list, dict]:
    """The stream through our transport's request path (as HttpStreamBackend sends it)."""
    transport = StreamingTransport()
    post = transport.poster(url, httpx.Headers(), 5.0, 5.0)
    events: list = []
    try:
        async for batch in read_events(None, "/v1/completions", {"max_tokens": 1}, Sink(), post=post):  # type: ignore[arg-type]
            events += batch
        return events, transport.clock()
    finally:
        await transport.aclose()


def _run(srv: OneEventServer) -> tuple[list, dict]:
    def block() -> None:  # the client's loop is busy (as a saturated client is) while the events arrive
        srv.client_blocked.set()
        time.sleep(srv.block_s)
        srv.unblocked_ns = time.perf_counter_ns()

    async def main():
        asyncio.get_running_loop().call_later(0.02, block)  # the request has been answered by then
        return await _one_stream(srv.url)
    try:
        return asyncio.run(main())
    finally:
        srv.close()


@pytest.mark.skipif(not rxstamp.kernel_stamps(), reason="no SO_TIMESTAMPNS on this platform")
@pytest.mark.parametrize("reader", ["thread", "native", "python"])
def test_kernel_stamp_is_arrival_time_while_the_loop_was_blocked(reader: str, monkeypatch: pytest.MonkeyPatch):
    _reader(reader, monkeypatch)
    srv = OneEventServer()
    events, clock = _run(srv)
    tokens = [e for e in events if e.id is not None]
    assert len(tokens) == 1, events
    ev = tokens[0]
    assert int(ev.id) == srv.sent_ns
    late_kernel_ms = (ev.t_ns - srv.sent_ns) / 1e6
    late_user_ms = (ev.rx_ns - srv.sent_ns) / 1e6
    # arrival, in the perf_counter_ns domain: on loopback the kernel stamps inside the server's send
    # (bounds whatever the scheduler does, up to the realtime->monotonic offset's error; the loop
    # stayed blocked far longer)
    tol = rxstamp.OFFSET_BRACKET_NS
    assert srv.sent_ns - tol <= ev.t_ns <= srv.after_ns[0] + tol, (late_kernel_ms, late_user_ms)
    assert srv.sent_ns < srv.unblocked_ns  # (the event did arrive while the loop was blocked)
    if reader == "thread":  # read (and stamped) by the receive thread while the loop was blocked
        assert ev.rx_ns < srv.unblocked_ns, late_user_ms
        assert clock["reader"].startswith("receive thread")
    else:  # read by the loop once it ran again (tens of ms after arrival)
        assert ev.rx_ns >= srv.unblocked_ns, late_user_ms
        assert clock["reader"].startswith("event loop")
    assert clock["source"] == rxstamp.KERNEL_CLOCK and clock["kernel_stamped_reads"] >= 2
    # the longest wait of a read in its socket: the loop readers waited out the block, the thread not
    assert (clock["read_delay_max_ms"] >= (srv.unblocked_ns - srv.sent_ns) / 1e6 - 1) == (reader != "thread")


def _reader(reader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if reader == "thread" and native.RxThread is None:
        pytest.skip(f"native helpers: {native.status}")
    if reader == "native" and native.recv_stamped is None:
        pytest.skip(f"native helpers: {native.status}")
    if reader != "thread":  # the event loop reads each socket
        monkeypatch.setenv(rxstamp.THREAD_ENV, "0")
    if reader == "python":  # the pure-Python read (what runs without the compiled helpers)
        monkeypatch.setattr(rxstamp, "_recv_stamped", None)


@pytest.mark.skipif(not rxstamp.kernel_stamps(), reason="no SO_TIMESTAMPNS on this platform")
@pytest.mark.skipif(native.RxThread is None, reason=f"native helpers: {native.status}")
def test_two_events_arriving_during_one_stall_keep_their_own_arrival_times(monkeypatch):
    """The failure the receive thread exists for: read late, the kernel's queue merges the two
    segments and reports the newer stamp for both (the older event ~60 ms late); read as they
    arrive, each keeps its own. The loop is blocked for the whole time both arrive."""
    _reader("thread", monkeypatch)
    srv = OneEventServer(events=2, gap_s=0.06)
    events, clock = _run(srv)
    tokens = [e for e in events if e.id is not None]
    assert [int(e.id) for e in tokens] == srv.sent
    late_ms = [(e.t_ns - int(e.id)) / 1e6 for e in tokens]
    assert all(0 <= x < 1.0 for x in late_ms), late_ms
    assert (tokens[1].t_ns - tokens[0].t_ns) / 1e6 > 40  # two arrivals ~60 ms apart, not one


def test_receive_thread_add_remove_drain_eof_and_close():
    """RxThread's own contract on a socketpair: reads in order with stamps, EOF as b"", nothing
    read after remove(), drain empty when nothing came, closed twice without harm."""
    if native.RxThread is None:
        pytest.skip(f"native helpers: {native.status}")
    import select

    rx = native.RxThread()
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        a.setblocking(False)
        c.setblocking(False)
        ka, kc = rx.add(a.fileno()), rx.add(c.fileno())
        assert ka != kc and rx.drain() == []
        t0 = time.perf_counter_ns()
        b.sendall(b"one")
        assert select.select([rx.fileno()], [], [], 5)[0]  # the eventfd wakes the loop
        time.sleep(0.01)
        got = rx.drain()
        assert [(k, data, x) for k, data, _, _, x in got] == [(ka, b"one", None)]  # x None: a plain read
        _, _, t, u, _ = got[0]
        assert t0 <= t <= u <= time.perf_counter_ns()  # (socketpairs carry no kernel stamp: t == u)
        rx.remove(kc)
        d.sendall(b"never read")
        b.close()
        time.sleep(0.05)
        assert [(k, data) for k, data, _, _, _ in rx.drain()] == [(ka, b"")]  # EOF; nothing of c
        assert c.recv(100) == b"never read"  # still in c's socket: the thread left it alone
    finally:
        rx.close()
        rx.close()
        for s in (a, c, d):
            s.close()
    with pytest.raises(ValueError, match="closed"):
        rx.drain()


def test_user_space_stamps_when_kernel_stamps_are_off(monkeypatch):
    monkeypatch.setenv(rxstamp.CLOCK_ENV, "user")
    srv = OneEventServer()
    events, clock = _run(srv)
    (ev,) = [e for e in events if e.id is not None]
    assert ev.t_ns == ev.rx_ns  # the read time is the stamp
    assert ev.t_ns >= srv.unblocked_ns > srv.sent_ns  # stamped when the loop read it, after the block
    assert clock["source"].startswith("user")


def test_bad_clock_setting_is_refused(monkeypatch):
    monkeypatch.setenv(rxstamp.CLOCK_ENV, "bogus")
    with pytest.raises(UserError, match="LLM_COMPARE_RX_CLOCK"):
        rxstamp.kernel_stamps()


_FIRST_READ = """
import socket, sys
from backends.http.rxstamp import SO_TIMESTAMPNS, ANC_SPACE
from backends.http.transport import StreamingTransport

StreamingTransport()
with socket.create_server(("127.0.0.1", 0)) as ls:
    c = socket.create_connection(ls.getsockname())
    c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    peer, _ = ls.accept()
    peer.sendall(b"x")
    print(len(c.recvmsg(1, ANC_SPACE)[1]))
"""


@pytest.mark.skipif(not rxstamp.kernel_stamps(), reason="no SO_TIMESTAMPNS on this platform")
def test_the_first_read_of_a_new_process_carries_a_kernel_stamp():
    """The kernel turns packet stamping on some time after the first socket of the machine asks
    for it: a transport waits for it, so a fresh process's first read is kernel-stamped (without the
    wait it is not whenever no other process of the machine holds a stamped socket)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    for _ in range(3):  # three fresh processes (the machine-wide switch may go off between them)
        p = subprocess.run([sys.executable, "-c", _FIRST_READ], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert p.returncode == 0, p.stderr[-2000:]
        assert p.stdout.strip() == "1", "the first read carried no kernel stamp"
