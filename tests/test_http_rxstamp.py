"""Kernel receive stamps (backends/http/rxstamp.py) against a real loopback server: an event that
arrives while the client's event loop is blocked keeps the time it ARRIVED (the kernel's stamp),
not the time the loop got around to reading it; the user-space stamp beside it shows the lag."""
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
from compare.errors import UserError

BLOCK_S = 0.05


class OneEventServer:
    """A blocking HTTP/1.1 server in a thread: answers one POST with a chunked event stream; its
    one token event is written (``id:`` = perf_counter_ns just before the write) only once the
    client says its loop is blocked, then the end of the body after the client unblocks."""

    def __init__(self) -> None:
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.lsock.getsockname()[1]}"
        self.client_blocked = threading.Event()
        self.sent_ns = 0
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
            self.sent_ns = time.perf_counter_ns()
            event = b"id: %d\ndata: {\"x\": 1}\n\n" % self.sent_ns
            conn.sendall(b"%x\r\n%b\r\n" % (len(event), event))
            time.sleep(BLOCK_S + 0.03)  # the client has read the event by now
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
    def block() -> None:  # the client's loop is busy (as a saturated client is) while the event arrives
        srv.client_blocked.set()
        time.sleep(BLOCK_S)

    async def main():
        asyncio.get_running_loop().call_later(0.02, block)  # the request has been answered by then
        return await _one_stream(srv.url)
    try:
        return asyncio.run(main())
    finally:
        srv.close()


@pytest.mark.skipif(not rxstamp.kernel_stamps(), reason="no SO_TIMESTAMPNS on this platform")
@pytest.mark.parametrize("reader", ["native", "python"])
def test_kernel_stamp_is_arrival_time_while_the_loop_was_blocked(reader: str, monkeypatch: pytest.MonkeyPatch):
    if reader == "native" and native.recv_stamped is None:
        pytest.skip(f"native helpers: {native.status}")
    if reader == "python":  # the pure-Python read (what runs without the compiled helpers)
        monkeypatch.setattr(rxstamp, "_recv_stamped", None)
    srv = OneEventServer()
    events, clock = _run(srv)
    tokens = [e for e in events if e.id is not None]
    assert len(tokens) == 1, events
    ev = tokens[0]
    assert int(ev.id) == srv.sent_ns
    late_kernel_ms = (ev.t_ns - srv.sent_ns) / 1e6
    late_user_ms = (ev.rx_ns - srv.sent_ns) / 1e6
    assert 0 <= late_kernel_ms < 1.0, (late_kernel_ms, late_user_ms)  # arrival, in the perf_counter_ns domain
    assert late_user_ms >= BLOCK_S * 1e3 - 10, late_user_ms  # the loop was blocked ~45 ms after arrival
    assert clock["source"] == rxstamp.KERNEL_CLOCK and clock["kernel_stamped_reads"] >= 2


def test_user_space_stamps_when_kernel_stamps_are_off(monkeypatch):
    monkeypatch.setenv(rxstamp.CLOCK_ENV, "user")
    srv = OneEventServer()
    events, clock = _run(srv)
    (ev,) = [e for e in events if e.id is not None]
    assert ev.t_ns == ev.rx_ns  # the read time is the stamp
    assert (ev.t_ns - srv.sent_ns) / 1e6 >= BLOCK_S * 1e3 - 10
    assert clock["source"].startswith("user")


def test_bad_clock_setting_is_refused(monkeypatch):
    monkeypatch.setenv(rxstamp.CLOCK_ENV, "bogus")
    with pytest.raises(UserError, match="LLM_COMPARE_RX_CLOCK"):
        rxstamp.kernel_stamps()
