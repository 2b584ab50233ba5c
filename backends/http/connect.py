"""Opening a connection whose reads carry kernel receive stamps (``rxstamp.StampedSocket``)."""
from __future__ import annotations

import asyncio
import errno
import os
import socket
import time
from typing import Any

from backends.http.rxstamp import ANC_SPACE, SO_TIMESTAMPNS, ReadCounts, StampedSocket

# Linux stamps received packets only while some socket of the machine asks for stamps, and turns
# that on LATER than the setsockopt that asks (net_enable_timestamp defers it to a kernel work item;
# the last such socket closing turns it off the same way). Until then TCP reads carry no stamp and
# fall back to the user-space one: ~1 ms on an idle machine, but on a loaded 2-core host a whole
# 0.3 s measurement (600 events, 20 streams) was read without one kernel stamp. So a transport that
# uses kernel stamps first calls hold_stamping_on: one stamped socket stays open for the life of the
# process, and it waits (up to STAMPING_WAIT_S) until a loopback byte arrives stamped, so the
# connections opened after it get kernel stamps from their first read.
STAMPING_WAIT_S = 2.0
_keeper: socket.socket | None = None
_stamping: bool | None = None


def hold_stamping_on() -> bool:
    """Whether the kernel now stamps this process's TCP reads (checked once per process)."""
    global _keeper, _stamping
    if _stamping is None:
        _stamping = False
        try:
            with socket.create_server(("127.0.0.1", 0)) as ls:
                c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                c.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                c.settimeout(STAMPING_WAIT_S)
                c.connect(ls.getsockname())
                peer, _ = ls.accept()
        except OSError:  # no loopback TCP: reads are counted kernel- or user-stamped as they come
            return False
        _keeper = c
        # (not UDP: its receive path stamps an unstamped datagram itself; TCP hands over none)
        deadline = time.monotonic() + STAMPING_WAIT_S
        with peer:
            try:
                while not _stamping and time.monotonic() < deadline:
                    peer.sendall(b".")
                    _stamping = bool(c.recvmsg(1, ANC_SPACE)[1])
                    if not _stamping:
                        time.sleep(0.001)
            except OSError:
                pass
    return _stamping


def _numeric(host: str, port: int) -> list[tuple[Any, ...]] | None:
    """An IP literal needs no resolver (asyncio's create_connection skips it too; its threaded
    getaddrinfo per connection would cost thousands of executor calls at a 2000-stream start)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host.strip("[]"))
        except OSError:
            continue
        addr = (host.strip("[]"), port) if family == socket.AF_INET else (host.strip("[]"), port, 0, 0)
        return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", addr)]
    return None


async def _connect(loop: asyncio.AbstractEventLoop, sock: socket.socket, addr: Any) -> None:
    """Non-blocking connect; waits for writability only when the handshake is in progress.
    (``loop.sock_connect`` cost ~80 us more per connection: at one 50-event stream per
    connection that was ~1.6 us per event.)"""
    err = sock.connect_ex(addr)
    if err == 0:
        return
    if err not in (errno.EINPROGRESS, errno.EAGAIN, errno.EINTR):
        raise OSError(err, os.strerror(err))
    fd = sock.fileno()
    done = loop.create_future()
    loop.add_writer(fd, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_writer(fd)
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


async def open_stamped(loop: asyncio.AbstractEventLoop, host: str, port: int, protocol: Any,
                       counts: ReadCounts) -> StampedSocket:
    """Connect to ``host:port`` (each resolved address in turn, as ``create_connection`` does)
    with kernel receive stamps on. OSError as ``create_connection`` raises it."""
    infos = _numeric(host, port) or await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                           proto=socket.IPPROTO_TCP)
    err: OSError | None = None
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio's transports do
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            await _connect(loop, sock, addr)
        except OSError as e:
            sock.close()
            err = e
            continue
        except BaseException:  # cancelled (connect timeout)
            sock.close()
            raise
        return StampedSocket(loop, sock, protocol, counts)
    raise err or OSError(f"no address for {host}:{port}")
