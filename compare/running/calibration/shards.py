"""A loopback server in K processes sharing one port, so one Python core is not its ceiling.

Why: the calibration server is one asyncio process on one core; at ~90,000 events/s it is the
bottleneck, so a client faster than that (several ``--client-procs``, the receive thread's C
parser) could not be measured against it. With ``SO_REUSEPORT`` every process listens on the same
port and the kernel spreads new connections across them; each process is pinned to its own CPUs.

The processes publish their counters (events sent, CPU seconds) into one shared page every
``PUBLISH_S``, so a ``/stats`` request answered by any of them reports the whole server.
"""
from __future__ import annotations

import mmap
import os
import resource
import signal
import socket
import struct
from typing import Callable

PUBLISH_S = 0.01
_SLOT = struct.Struct("=qqdd")  # pid, events, user_s, sys_s


def listener(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` that other processes may bind too (port 0: a free one)."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(8192)
    s.setblocking(False)
    return s


class Board:
    """K slots in a page shared across fork(): each shard writes its own, anyone sums them."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.mem = mmap.mmap(-1, max(mmap.PAGESIZE, k * _SLOT.size))

    def publish(self, i: int, events: int) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        _SLOT.pack_into(self.mem, i * _SLOT.size, os.getpid(), events, ru.ru_utime, ru.ru_stime)

    def total(self) -> dict[str, float]:
        """Events sent and CPU seconds of every shard (as of its last publish)."""
        slots = [_SLOT.unpack_from(self.mem, i * _SLOT.size) for i in range(self.k)]
        return {"events": sum(s[1] for s in slots), "user_s": sum(s[2] for s in slots),
                "sys_s": sum(s[3] for s in slots), "shards": self.k, "events_per_shard": [s[1] for s in slots]}


def run(host: str, port: int, k: int, cpus: list[int], serve: Callable[[socket.socket, int, Board], None],
        ready: Callable[[int], None]) -> None:
    """Serve on ``host:port`` from ``k`` processes: ``serve(listening_socket, shard, board)`` in each
    (this process is shard 0), the CPUs dealt out round-robin; ``ready(port)`` once all listen.
    A shard that exits takes the others down with it (they are this process's children)."""
    first = listener(host, port)
    port = first.getsockname()[1]
    board = Board(k)
    children: list[int] = []
    for i in range(1, k):
        sock = listener(host, port)  # bound here, before ready(): no connection can miss a shard
        pid = os.fork()
        if pid == 0:
            first.close()
            try:
                _die_with_parent()
                _pin(cpus, i, k)
                serve(sock, i, board)
            finally:
                os._exit(0)
        sock.close()
        children.append(pid)

    def stop(signum: int, _frame: object) -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    _pin(cpus, 0, k)
    ready(port)
    try:
        serve(first, 0, board)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _die_with_parent() -> None:
    """A shard outlives no SIGKILLed parent (Linux: PR_SET_PDEATHSIG); elsewhere the parent's
    SIGTERM handler and the process group are what stop it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pin(cpus: list[int], i: int, k: int) -> None:
    """Shard ``i`` of ``k`` gets every k-th of ``cpus`` (all of them when there are fewer CPUs than shards)."""
    mine = cpus[i::k] or cpus
    if mine:
        os.sched_setaffinity(0, set(mine))
