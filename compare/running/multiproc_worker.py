"""One client process of a process-sharded load level (compare/running/multiproc.py starts it).

It opens its own HTTP client to the server the parent started (or was pointed at), says it is
ready, waits for the level's common start instant, then sends its share of the level:

- closed loop: ``workers`` streams of the level's concurrency, each taking the next request from
  one counter in shared memory, so the N processes together drain one queue in the level's order
  exactly as one process's workers would;
- open loop: the arrivals of the one seeded schedule dealt to it, each sent at start + its offset.

The level itself is the executor's (executor.LevelLoop, as one process runs it) over a request
source in shared memory (SharedSource) instead of the process's own queue.

Every stamp is ``perf_counter_ns`` (CLOCK_MONOTONIC on Linux, one clock for every process of the
machine), so the parent merges the records of all processes on one clock. The error policy is
shared too: failed requests are counted in shared memory and the process whose failure crosses
``--max-errors`` (or sees the engine die) stops the level for all of them, as in one process.

The parent owns the signals: these processes ignore SIGINT/SIGTERM/SIGHUP (a Ctrl-C reaches the
whole process group) and are told to cancel over their pipe; they die with the parent
(PR_SET_PDEATHSIG) and carry its owner tag, so a killed run leaves none behind.
"""
from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import mmap
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from backends.base import ClientRecipe
from core.errors import FailureKind
from core.records import GenerationRequest, RequestRecord

HEARTBEAT_S = 0.05  # how often an idle process tells the parent how far its records are complete
# shared counters (one int64 array): next request index (closed loop), failed requests, stop flag,
# closed-loop streams (of all processes) still to take a first request
NEXT, FAILED, STOP, UNSTARTED = 0, 1, 2, 3
SHARED_BYTES = 32


class Shared:
    """The level's counters, in a memory file every client process maps (``memfd``), under a POSIX
    record lock (per process, so it excludes the other processes; a request takes it once)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._mm = mmap.mmap(fd, SHARED_BYTES)
        self.v = memoryview(self._mm).cast("q")

    @classmethod
    def create(cls) -> "Shared":
        fd = os.memfd_create("llm-compare-level", 0)
        os.ftruncate(fd, SHARED_BYTES)
        return cls(fd)

    def __enter__(self) -> "Shared":
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        self.v.release()
        self._mm.close()
        os.close(self.fd)


@dataclass(frozen=True)
class Share:
    """One process's part of a level."""

    index: int  # 0-based process number
    level_label: str
    kind: str  # "concurrency" | "rate"
    requests: list[GenerationRequest]  # closed loop: the whole list (shared counter); open: its arrivals
    offsets_ns: list[int] | None  # open loop: each of ``requests``' offsets from the level start
    workers: int  # closed loop: this process's part of the concurrency
    timeout_s: float
    max_errors: int


def _die_with_parent(parent: int) -> None:
    try:  # PR_SET_PDEATHSIG = 1: SIGKILL this process when the parent thread exits
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # it died before the call above
        os._exit(1)


def main(argv: list[str]) -> None:
    """``python -m compare.running.multiproc_worker CONN_FD SHARED_FD PARENT_PID``: the share and
    the recipe come over the connection (never argv: the recipe may hold credentials)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    _die_with_parent(int(argv[2]))
    from multiprocessing.connection import Connection

    from compare.running import aio

    conn = Connection(int(argv[0]))
    shared = Shared(int(argv[1]))
    share, recipe = conn.recv()
    try:
        aio.run_loop(_run(share, recipe, conn, shared))
    except BaseException as e:  # one line for the parent; the traceback goes to the engine log
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        finally:
            raise


class SharedSource:
    """The level's request order and error policy over every client process, in shared memory:
    the N processes together drain one queue and count one set of failures, as one process would
    (executor.LocalSource)."""

    def __init__(self, share: Share, shared: Any, conn: Any) -> None:
        self.share, self.lock, self.counters, self.conn = share, shared, shared.v, conn

    def pop(self, early: bool = False) -> GenerationRequest | None:
        n, c = len(self.share.requests), self.counters
        with self.lock:
            i = c[NEXT]
            if c[STOP] or i >= n or (early and n - i <= c[UNSTARTED]):
                return None  # (early: another stream still waits for a first request)
            c[NEXT] = i + 1
        return self.share.requests[i]

    def pop_early(self) -> GenerationRequest | None:
        return self.pop(True)

    def started(self) -> None:
        with self.lock:
            self.counters[UNSTARTED] -= 1

    def stopped(self) -> bool:
        return bool(self.counters[STOP])

    def failed(self, rec: RequestRecord, stopped: bool) -> str | None:
        # the shared stop flag decides, not this process's own stop: the first process whose
        # failure crosses the limit reports it, and the parent stops the others
        c = self.counters
        with self.lock:
            c[FAILED] += 1
            failed = c[FAILED]
            if c[STOP]:
                return None
            if rec.error_kind == FailureKind.ENGINE_DEAD:
                reason = f"the engine died mid-run: {rec.error}"
            elif failed > self.share.max_errors:
                reason = (f"{failed} failed requests exceed --max-errors {self.share.max_errors}; "
                          f"last error: {rec.error_kind}: {rec.error}")
            else:
                return None
            c[STOP] = 1
        self.conn.send(("aborted", reason))
        return reason


async def _run(share: Share, recipe: ClientRecipe, conn: Any, shared: Any) -> None:
    from compare.running.executor import LevelLoop, LoopLagMonitor, gc_quiet

    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: inbox.put_nowait(_recv(conn)))
    backend = recipe.build()
    backend.set_request_timeout(share.timeout_s)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(backend)
        stack.enter_context(gc_quiet())  # collected and frozen before the start, not during the level
        conn.send(("ready", os.getpid()))
        msg = await inbox.get()
        if msg[0] != "go":
            return
        t0: int = msg[1]
        sent = 0

        def send(rec: RequestRecord) -> None:
            nonlocal sent
            sent += 1
            conn.send(("rec", rec))

        level = LevelLoop(backend, share.level_label, SharedSource(share, shared, conn), share.timeout_s, send)

        async def heartbeat() -> None:
            # no record this process sends later ends before this stamp: the parent may write
            # every other process's records up to it (the merge order, compare/running/multiproc.py)
            while True:
                conn.send(("tick", time.perf_counter_ns()))
                await asyncio.sleep(HEARTBEAT_S)

        async def listen() -> None:
            while True:
                if (await inbox.get())[0] in ("cancel", "eof"):
                    level.stop()
                    return

        while (delay := t0 - time.perf_counter_ns()) > 0:  # the common start instant
            await asyncio.sleep(delay / 1e9)
        cpu0, w0 = _cpu_s(), time.perf_counter_ns()
        with LoopLagMonitor() as lag:
            side = [loop.create_task(heartbeat()), loop.create_task(listen())]
            try:  # a task's exception (a bug, not a request failure) reaches the parent through main
                if share.kind == "concurrency":
                    await level.run(t0, streams=share.workers)
                else:
                    await level.run(t0, arrivals=list(zip(share.requests, share.offsets_ns or [])))
            finally:
                t_end = time.perf_counter_ns()
                for t in side:
                    t.cancel()
        wall = (t_end - w0) / 1e9
        cpu = _cpu_s() - cpu0
        clock = backend.describe().extra.get("event_clock")
        conn.send(("done", {"process": share.index + 1, "pid": os.getpid(), "requests": sent,
                            "t_end_ns": t_end, "loop_lag_ms": lag.summary(), "cpu_s": round(cpu, 3),
                            "lag_samples": (lag.t_ns, lag.lags_ms),  # the parent judges client health
                            "cpu_util": round(cpu / wall, 3) if wall > 0 else None,
                            "event_clock": clock}))


def _recv(conn: Any) -> tuple:
    try:
        return conn.recv()
    except (EOFError, OSError):  # the parent is gone or closed the pipe: stop
        asyncio.get_running_loop().remove_reader(conn.fileno())
        return ("eof",)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


if __name__ == "__main__":
    main(sys.argv[1:])
