"""A load level sent by several client processes (``compare run --client-procs N``).

One Python client process follows a limited number of streamed events per second (its event
loop spends microseconds per event); a big GPU server can produce more. For HTTP backends the
level is then split over N processes (compare/running/multiproc_worker.py), spawned fresh for
each level, each with its own HTTP client to the one server:

- closed loop: the level's concurrency is divided among them (c=10 over 4: 3,3,2,2 streams) and
  every stream takes the next request from one shared counter: the same queue, drained in the same
  order, as in one process;
- open loop: the one seeded arrival schedule is kept and its arrivals dealt round-robin (arrival
  i to process i mod N), each sent at the level's start + its own offset.

All of them start at one instant on CLOCK_MONOTONIC (``perf_counter_ns``, shared by every
process of the machine), chosen once all are connected and ready. Their records come back over
pipes and are written to requests.jsonl in the order one process would have written them: by
completion time (``t_end_ns``), merged as each process reports how far it has got (a heartbeat
every 50 ms). The records are the ones one process makes (run_one, same fields and meaning);
the level's summary adds ``client_procs``: how many ran, and each one's event-loop lag and CPU use.

Failures: a client process that dies ends the level (the others' requests in flight are
cancelled) with one line naming it; the backend is then marked failed like any aborted level. A
stop signal cancels every process's requests as the single-process executor does, and no client
process outlives the level (nor the run: they die with it, PR_SET_PDEATHSIG).
"""
from __future__ import annotations

import asyncio
import heapq
import math
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from backends.base import Backend
from core.records import GenerationRequest, RequestRecord
from compare.analysis.client_health import LagSamples
from compare.running import multiproc_worker as worker
from compare.running.executor import CANCEL_GRACE_S, LevelInterrupted, LevelOutcome, gc_quiet
from compare.running.partition import partition
from compare.workload.schedule import LoadLevel

READY_TIMEOUT_S = 120.0  # spawn + imports + the client's probe of the server, per level
START_MARGIN_S = 0.1  # from "all ready" to the common start instant: every process is waiting by then
LOCAL_ENGINE_CORES = 4  # cores left to an engine that runs on this machine (API server, engine core, worker)
MAX_AUTO = 8
STREAMS_PER_PROC_AUTO = 16  # auto: one more process per this many closed-loop streams


def not_shardable(backend: Backend) -> str | None:
    """Why ``backend``'s requests cannot be sent from other processes (None: they can): it gives
    no client recipe (backends/base.py ``client_recipe``)."""
    if backend.client_recipe() is None:
        return (f"{backend.name} has no client another process can rebuild (its engine or its client runs "
                f"in this process, or its wire protocol is not a registered one), so its requests cannot be "
                f"sent from other processes")
    return None


def auto_procs(backend: Backend, cores: int | None = None) -> int:
    """``--client-procs auto``: two cores per client process, after the engine's share when it runs
    here (16 cores, local engine: 6; 2 cores: 1); 1 for backends that cannot be sharded."""
    if not_shardable(backend) is not None:
        return 1
    cores = cores or len(os.sched_getaffinity(0))
    reserve = LOCAL_ENGINE_CORES if backend.engine_is_local else 0
    return max(1, min(MAX_AUTO, (cores - reserve) // 2))


def level_procs(requested: int | None, backend: Backend, level: LoadLevel, n_requests: int) -> int:
    """Client processes for one level: never more than its streams or requests; ``requested`` None
    (auto) also uses one process per 16 closed-loop streams, so small levels pay no spawn."""
    n = auto_procs(backend) if requested is None else requested
    if level.kind == "concurrency":
        streams = min(int(level.value), n_requests)
        n = min(n, streams, math.ceil(streams / STREAMS_PER_PROC_AUTO) if requested is None else streams)
    return max(1, min(n, n_requests))


def deal(requests: list[GenerationRequest], level: LoadLevel, n: int, seed: int, timeout_s: float,
         max_errors: int) -> tuple[list[worker.Share], list[int] | None]:
    """Each process's share of the level, and the level's schedule (open loop)."""
    parts, offsets = partition(level, len(requests), n, seed, streams=min(int(level.value), len(requests)))
    if level.kind == "concurrency":  # every process draws from the whole list (one shared counter)
        return [worker.Share(p.index, level.label, level.kind, requests, None, p.streams, timeout_s, max_errors)
                for p in parts], None
    return [worker.Share(p.index, level.label, level.kind, [requests[i] for i in p.requests], p.offsets_ns, 0,
                         timeout_s, max_errors) for p in parts], offsets


class _Merge:
    """Records of N processes, released in completion order: a record is written once every process
    still running has reported (a record or a heartbeat) a stamp at or after its end."""

    def __init__(self, n: int, on_record: Callable[[RequestRecord], None] | None) -> None:
        self.mark = [0] * n
        self.open = set(range(n))
        self.heap: list[tuple[int, int, RequestRecord]] = []
        self.seq = 0
        self.out: list[RequestRecord] = []
        self.on_record = on_record

    def add(self, k: int, rec: RequestRecord) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (rec.t_end_ns, self.seq, rec))
        self.mark[k] = max(self.mark[k], rec.t_end_ns)

    def close(self, k: int) -> None:
        self.open.discard(k)

    def release(self) -> None:
        upto = min((self.mark[k] for k in self.open), default=None)
        while self.heap and (upto is None or self.heap[0][0] <= upto):
            rec = heapq.heappop(self.heap)[2]
            self.out.append(rec)
            if self.on_record:
                self.on_record(rec)


async def run_level_procs(backend: Backend, requests: list[GenerationRequest], level: LoadLevel, *, procs: int,
                          seed: int, timeout_s: float, max_errors: int,
                          on_record: Callable[[RequestRecord], None] | None = None,
                          on_start: Callable[[list[int]], None] | None = None) -> LevelOutcome:
    """``executor.run_level`` with the level's requests sent by ``procs`` client processes.
    ``on_start``: called with their pids once all are ready and the start instant is set."""
    # what each request's server said (llama-server's timings) reaches the backend's level summary
    # as when this process streamed it (Backend.stream_metrics)
    def released(rec: RequestRecord, then: Callable[[RequestRecord], None] | None = on_record) -> None:
        if rec.ok and rec.engine_metrics:
            backend.stream_metrics(rec.engine_metrics)
        if then is not None:
            then(rec)
    on_record = released
    with gc_quiet():
        level_run = _Level(backend, requests, level, procs, seed, timeout_s, max_errors, on_record)
        level_run.on_start = on_start
        return await level_run.run()


class _Level:
    def __init__(self, backend: Backend, requests: list[GenerationRequest], level: LoadLevel, n: int, seed: int,
                 timeout_s: float, max_errors: int, on_record: Callable[[RequestRecord], None] | None) -> None:
        self.level, self.n, self.planned = level, n, len(requests)
        self.shares, self.offsets = deal(requests, level, n, seed, timeout_s, max_errors)
        recipe = backend.client_recipe()
        if recipe is None:
            raise ValueError(not_shardable(backend))
        self.recipe = recipe
        self.merge = _Merge(n, on_record)
        self.inbox: asyncio.Queue[tuple[int, tuple]] = asyncio.Queue()
        self.procs: list[subprocess.Popen] = []
        self.shared: worker.Shared | None = None
        self.conns: list[Any] = []
        self.stats: dict[int, dict[str, Any]] = {}
        self.lag_samples: dict[int, LagSamples] = {}  # each process's loop-lag wake-ups
        self.sent_by: dict[int, list[RequestRecord]] = {}  # and the records it sent
        self.errors: dict[int, str] = {}
        self.aborted: list[str] = []
        self.finished: set[int] = set()
        self.cancelled = False
        self.on_start: Callable[[list[int]], None] | None = None

    # ---------------------------------------------------------------- processes
    def _spawn(self) -> None:
        """Fresh interpreters (``python -m``), never a fork of a process that holds engines and
        threads, nor multiprocessing's spawn (it re-runs the caller's main script)."""
        self.shared = worker.Shared.create()
        self.shared.v[worker.UNSTARTED] = sum(s.workers for s in self.shares if s.kind == "concurrency")
        for share in self.shares:
            mine, theirs = socket.socketpair()
            fd = theirs.fileno()
            p = subprocess.Popen([sys.executable, "-m", "compare.running.multiproc_worker", str(fd),
                                  str(self.shared.fd), str(os.getpid())], pass_fds=(fd, self.shared.fd))
            theirs.close()
            conn = Connection(mine.detach())
            self.procs.append(p)
            self.conns.append(conn)
            conn.send((share, self.recipe))

    def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        for k, conn in enumerate(self.conns):
            loop.add_reader(conn.fileno(), self._on_readable, k, conn)

    def _on_readable(self, k: int, conn: Any) -> None:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            msg = ("eof",)
        self.inbox.put_nowait((k, msg))

    def _send_all(self, msg: tuple) -> None:
        for k, conn in enumerate(self.conns):
            if k not in self.finished:
                try:
                    conn.send(msg)
                except OSError:
                    pass  # that one is gone; its end of the pipe says so

    def _who(self, k: int) -> str:
        return f"client process {k + 1} of {self.n} (pid {self.procs[k].pid})"

    def _death(self, k: int) -> str:
        code = _wait(self.procs[k], 1.0)
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exited with code {code}" if code is not None else "closed its pipe")
        said = f": {self.errors[k]}" if k in self.errors else ""
        return f"{self._who(k)} died ({how}{said}); the level is incomplete (its output is in the backend's log)"

    # ---------------------------------------------------------------- messages
    def _handle(self, k: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == "rec":
            self.merge.add(k, msg[1])
            self.sent_by.setdefault(k, []).append(msg[1])
        elif kind == "tick":
            self.merge.mark[k] = max(self.merge.mark[k], msg[1])
        elif kind == "aborted":
            self.aborted.append(msg[1])
            self._send_all(("cancel",))  # the others stop too, as one process's level would
        elif kind == "done":
            t_ns, lags = msg[1].pop("lag_samples", ((), ()))
            self.lag_samples[k] = LagSamples(tuple(t_ns), tuple(lags))
            self.stats[k] = msg[1]
            self.finished.add(k)
            self.merge.close(k)
        elif kind == "error":
            self.errors[k] = msg[1]
        elif kind == "eof" and k not in self.finished:
            self.finished.add(k)
            self.merge.close(k)
            told_to_stop = self.cancelled or bool(self.aborted)  # before the start: it leaves without a word
            if _wait(self.procs[k], 1.0) != 0 or k in self.errors or not told_to_stop:
                self.aborted.append(self._death(k))
                self._send_all(("cancel",))
        self.merge.release()

    async def _until(self, done: Callable[[], bool], timeout_s: float | None) -> None:
        async with asyncio.timeout(timeout_s):
            while not done():
                self._handle(*await self.inbox.get())

    # ---------------------------------------------------------------- the level
    async def run(self) -> LevelOutcome:
        t0 = time.perf_counter_ns()
        interrupted = False
        try:
            self._spawn()  # blocks the loop briefly, before the level's clock starts
            self._listen()
            ready: set[int] = set()

            def all_ready() -> bool:
                return len(ready) + len(self.finished) >= self.n or bool(self.aborted)

            while not all_ready():
                try:
                    async with asyncio.timeout(READY_TIMEOUT_S):
                        k, msg = await self.inbox.get()
                except TimeoutError:
                    late = [self._who(k) for k in range(self.n) if k not in ready]
                    self.aborted.append(f"{', '.join(late)} not ready within {READY_TIMEOUT_S:g} s")
                    break
                if msg[0] == "ready":
                    ready.add(k)
                else:
                    self._handle(k, msg)
            if self.aborted:
                self._send_all(("cancel",))
            else:
                t0 = time.perf_counter_ns() + int(START_MARGIN_S * 1e9)
                self._send_all(("go", t0))
                if self.on_start is not None:
                    self.on_start([p.pid for p in self.procs])
            await self._until(lambda: len(self.finished) >= self.n, None)
        except asyncio.CancelledError:
            interrupted = self.cancelled = True  # a stop signal: every process cancels what is in flight
            self._send_all(("cancel",))
            try:
                await self._until(lambda: len(self.finished) >= self.n, CANCEL_GRACE_S + 2.0)
            except TimeoutError:
                pass
        finally:
            self._reap()
        for k, msg in self._drain():  # what the processes sent before they ended (or were killed)
            if msg[0] in ("rec", "done", "error"):
                self._handle(k, msg)
        self.merge.open.clear()
        self.merge.release()
        # the level ends when its last process's requests have (as in one process), not at the teardown
        ends = [s.pop("t_end_ns") for s in self.stats.values() if "t_end_ns" in s]
        t_end = max(ends) if len(ends) == self.n else time.perf_counter_ns()
        outcome = LevelOutcome(level=self.level, records=self.merge.out, t_start_ns=t0,
                               t_end_ns=max(t_end, t0), schedule_offsets_ns=self.offsets,
                               loop_lag_ms=self._lag(), aborted=self.aborted[0] if self.aborted else None,
                               planned=self.planned, client_procs=self._summary(),
                               lag_samples_by_proc=[(s, self.sent_by.get(k, []))
                                                    for k, s in sorted(self.lag_samples.items())])
        if interrupted:
            raise LevelInterrupted(outcome)
        return outcome

    def _drain(self) -> list[tuple[int, tuple]]:
        out = []
        while not self.inbox.empty():
            out.append(self.inbox.get_nowait())
        return out

    def _reap(self) -> None:
        """No client process outlives the level: those still running after the grace are killed."""
        loop = asyncio.get_running_loop()
        for conn in self.conns:
            try:
                loop.remove_reader(conn.fileno())
            except (OSError, ValueError):
                pass
        for p in self.procs:
            if _wait(p, 0.5) is None:
                p.kill()
                _wait(p, 5.0)
        if self.shared is not None:
            self.shared.close()
            self.shared = None
        for k, conn in enumerate(self.conns):
            # records a process sent before it ended are still in the pipe
            try:
                while conn.poll():
                    self.inbox.put_nowait((k, conn.recv()))
            except (EOFError, OSError):
                pass
            conn.close()

    def _lag(self) -> dict[str, float]:
        lags = [s["loop_lag_ms"] for s in self.stats.values()]
        if not lags:
            return {"max": 0.0, "p99": 0.0, "samples": 0}
        return {"max": max(x["max"] for x in lags), "p99": max(x["p99"] for x in lags),
                "samples": sum(x["samples"] for x in lags)}

    def _summary(self) -> dict[str, Any]:
        return {"n": self.n, "processes": [self.stats.get(k, {"process": k + 1, "pid": self.procs[k].pid
                                                              if k < len(self.procs) else None})
                                           for k in range(self.n)]}


def _wait(p: subprocess.Popen, timeout_s: float) -> int | None:
    try:
        return p.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return None


def check_procs(requested: int | None, backends: Any) -> None:
    """``--client-procs N`` (N > 1) needs backends whose requests other processes can send: one
    line naming the first that cannot, before anything starts. Auto (None) falls back to 1 for them."""
    if requested is None or requested <= 1:
        return
    for b in backends:
        why = not_shardable(b)
        if why is not None:
            from core.errors import UserError

            raise UserError(f"--client-procs {requested}: {why}; use --client-procs 1 with it, or an HTTP "
                            f"backend (vllm-server, openai@URL, tgi@URL, ...)")
