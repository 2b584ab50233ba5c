"""Executors own tasks, timeouts and cancellation; strategies (schedule.py) own timing."""
from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections import deque
from typing import Awaitable, Callable, Coroutine, Protocol, Sequence

from core.errors import BackendRequestError, FailureKind, RunFailed
from core.records import GenerationRequest, Lane, RequestContext, RequestRecord, StreamEnd, TokenBatch
from backends.base import Backend
from compare.analysis.client_health import LagSamples
from compare.running.outcome import LevelInterrupted, LevelOutcome
from compare.workload.schedule import LoadLevel, level_offsets_ns


class RunAborted(RunFailed):
    """Too many failed requests (error policy) or the engine died; records so far are kept."""


# how long requests in flight get to end once cancelled (a backend's stream may await its abort)
CANCEL_GRACE_S = 5.0


class LoopLagMonitor:
    """Measures how late the event loop wakes up: a lagging client inflates every latency."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.lags_ms: list[float] = []
        self.t_ns: list[int] = []  # when each wake-up happened: which requests a stall coincided with
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter_ns()
            await asyncio.sleep(self.interval_s)
            t = time.perf_counter_ns()
            self.t_ns.append(t)
            self.lags_ms.append(max(0.0, (t - t0) / 1e6 - self.interval_s * 1e3))

    def __enter__(self) -> "LoopLagMonitor":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()

    def samples(self) -> LagSamples:
        return LagSamples(tuple(self.t_ns), tuple(self.lags_ms), self.interval_s * 1e3)

    def summary(self) -> dict[str, float]:
        if not self.lags_ms:
            return {"max": 0.0, "p99": 0.0, "samples": 0}
        s = sorted(self.lags_ms)
        return {"max": round(s[-1], 3), "p99": round(s[min(len(s) - 1, int(0.99 * len(s)))], 3),
                "samples": len(s)}


@contextlib.contextmanager
def gc_quiet():
    """No garbage collection in the way of a level's timing, for every caller of run_level.

    Everything alive when the level starts (engine, tokenizer, torch, earlier levels' records) is
    frozen out of the collector's reach: full collections walking that heap (millions of objects
    with torch/vLLM loaded) stalled the loop while tokens streamed (0.5 s at concurrency 128 on the
    H200). The cyclic collector is also off during the level: at 2000 HTTP streams the young
    objects of in-flight requests made it run ~2 us per event and pause the loop up to ~30 ms; our
    request path leaves no cyclic garbage (measured: 0 objects after 1000 requests), and timeit
    pauses the GC for the same reason."""
    gc.collect()
    gc.freeze()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        gc.unfreeze()


async def run_one(backend: Backend, req: GenerationRequest, level: str, timeout_s: float,
                  t_scheduled_ns: int | None = None, t_ready_ns: int | None = None,
                  lane: Lane | None = None) -> RequestRecord:
    """Stream one request; never raises for request-level failures (they become records).
    ``t_ready_ns``: when it could have left (closed loop: when its stream's previous response ended);
    ``lane``: the closed-loop stream it belongs to (the backend may send the next request itself)."""
    times: list[int] = []
    counts: list[int] = []
    ids: list[int] = []
    lps: list[float] = []
    end: StreamEnd | None = None
    err_kind = err = None
    # this consumer takes TokenBatch items; a backend that knows when the bytes left stamps ctx
    ctx = RequestContext(batches=True, lane=lane)
    t_start = time.perf_counter_ns()
    t_ready = t_ready_ns or t_start
    try:
        async with asyncio.timeout(timeout_s):
            async for item in backend.stream(req, ctx):
                if type(item) is StreamEnd:
                    end = item
                    continue
                if type(item) is TokenBatch:  # many events at once (the HTTP client's native path)
                    times.extend(item.times_ns)
                    counts.extend(item.counts)
                    ids.extend(item.token_ids)
                    if item.logprobs:
                        lps.extend(item.logprobs)
                    continue
                times.append(item.t_ns)  # the hot path: one per streamed event
                counts.append(len(item.token_ids))
                ids.extend(item.token_ids)
                if item.logprobs:
                    lps.extend(item.logprobs)
    except TimeoutError:
        err_kind, err = FailureKind.TIMEOUT, f"no completion within {timeout_s:g} s"
    except BackendRequestError as e:
        err_kind, err = e.kind, e.message
    except asyncio.CancelledError:
        err_kind, err = FailureKind.CANCELLED, "run stopped before the request finished"
    t_sent = ctx.sent_ns or t_start  # (a backend that cannot tell: when it was asked to send)
    rec = RequestRecord(
        request_id=req.request_id, backend=backend.name, level=level, t_sent_ns=t_sent,
        t_scheduled_ns=t_scheduled_ns, t_ready_ns=t_ready, event_times_ns=tuple(times),
        event_token_counts=tuple(counts), token_ids=tuple(ids),
        t_end_ns=end.t_ns if end else time.perf_counter_ns(),
        finish_reason=end.finish_reason if end else None,
        prompt_tokens=end.prompt_tokens if end else None,
        usage_completion_tokens=end.completion_tokens if end else None,
        requested_tokens=req.max_tokens, error_kind=err_kind, error=err,
        engine_metrics=dict(end.engine_metrics) if end else {},
        logprobs=tuple(lps) if lps else None, send_window_ns=ctx.send_window_ns or None,
    )
    if err_kind is FailureKind.CANCELLED:
        # hand the partial record to the canceller, then honour the cancellation
        raise _CancelledWithRecord(rec)
    return rec


async def closed_loop_stream(pop: Callable[[], GenerationRequest | None],
                             pop_early: Callable[[], GenerationRequest | None], started: Callable[[], None],
                             one: Callable[..., Awaitable[RequestRecord]], stopped: Callable[[], bool]) -> None:
    """One stream of a closed-loop level: the next request when the previous one ends, until
    ``pop()`` has none. Its lane (core.records.Lane) takes the next request early (``pop_early``:
    None while another stream still waits for a first one) for a backend that sends it itself the
    moment the response before it ends. A request is due when the previous response ended (its
    last arrival), not when Python got round to it: that wait is the client's send delay."""
    lane = Lane(pop_early)
    ready = None
    while True:
        r, lane.next = lane.next, None
        if r is not None and stopped() and not lane.next_left():
            return  # taken early, never sent
        if r is None:
            r = pop()
            if ready is None:
                started()
        if r is None:
            return
        rec = await one(r, t_ready_ns=ready, lane=lane)
        ready = rec.event_times_ns[-1] if rec.event_times_ns else rec.t_end_ns


class _CancelledWithRecord(asyncio.CancelledError):
    def __init__(self, record: RequestRecord) -> None:
        super().__init__()
        self.record = record


class RequestSource(Protocol):
    """Where a level's requests come from and how its failures count: this process's own queue
    (LocalSource) or counters every client process of a sharded level shares
    (compare/running/multiproc_worker.py)."""

    def pop(self) -> GenerationRequest | None: ...  # closed loop: the next request (None: none left)

    def pop_early(self) -> GenerationRequest | None: ...  # the same for a lane; None while a stream has none

    def started(self) -> None: ...  # a stream took its first request

    def stopped(self) -> bool: ...  # stopped elsewhere (by another process)

    def failed(self, rec: RequestRecord, stopped: bool) -> str | None: ...  # count it; why the level stops now


class LocalSource:
    """One process's level: its requests in order, the error policy counted here."""

    def __init__(self, requests: list[GenerationRequest], streams: int, max_errors: int) -> None:
        self.queue = deque(requests)
        self.unstarted = streams  # streams still to take a first request
        self.max_errors = max_errors
        self.n_failed = 0

    def pop(self) -> GenerationRequest | None:
        return self.queue.popleft() if self.queue else None

    def pop_early(self) -> GenerationRequest | None:  # (never leaves a stream that has none idle)
        return self.pop() if len(self.queue) > self.unstarted else None

    def started(self) -> None:
        self.unstarted -= 1

    def stopped(self) -> bool:
        return False

    def failed(self, rec: RequestRecord, stopped: bool) -> str | None:
        self.n_failed += 1
        if stopped:
            return None
        if rec.error_kind == FailureKind.ENGINE_DEAD:
            # no point sending more: every further request would fail the same way
            return f"the engine died mid-run: {rec.error}"
        if self.n_failed > self.max_errors:
            return (f"{self.n_failed} failed requests exceed --max-errors {self.max_errors}; "
                    f"last error: {rec.error_kind}: {rec.error}")
        return None


class LevelLoop:
    """A level's tasks (closed-loop streams or timed arrivals), its error policy and its stop,
    over a RequestSource; every record goes to ``on_record``, cancelled ones included."""

    def __init__(self, backend: Backend, label: str, source: RequestSource, timeout_s: float,
                 on_record: Callable[[RequestRecord], None]) -> None:
        self.backend, self.label, self.source, self.timeout_s = backend, label, source, timeout_s
        self.on_record = on_record
        self.aborted: list[str] = []
        self._stop = asyncio.Event()

    def stopped(self) -> bool:
        return self._stop.is_set() or self.source.stopped()

    def stop(self, reason: str | None = None) -> None:
        """Stop sending; what is in flight is cancelled (each keeps its partial record)."""
        if reason is not None:
            self.aborted.append(reason)
        self._stop.set()

    def _keep(self, rec: RequestRecord) -> None:
        self.on_record(rec)
        if not rec.ok and (reason := self.source.failed(rec, self._stop.is_set())) is not None:
            self.stop(reason)

    async def send(self, r: GenerationRequest, t_scheduled_ns: int | None = None,
                   t_ready_ns: int | None = None, lane: Lane | None = None) -> RequestRecord:
        try:
            rec = await run_one(self.backend, r, self.label, self.timeout_s, t_scheduled_ns=t_scheduled_ns,
                                t_ready_ns=t_ready_ns, lane=lane)
        except _CancelledWithRecord as c:
            self.on_record(c.record)  # a request the stop cut short: kept as cancelled, not a failure
            raise
        self._keep(rec)
        return rec

    def _pop(self) -> GenerationRequest | None:
        return None if self.stopped() else self.source.pop()

    def _pop_early(self) -> GenerationRequest | None:
        return None if self.stopped() else self.source.pop_early()

    async def _timed(self, t0: int, r: GenerationRequest, off: int) -> None:
        # loop until due: timers may fire early (uvloop's are whole milliseconds), and a request
        # must never leave before its scheduled time
        while (delay := t0 + off - time.perf_counter_ns()) > 0:
            await asyncio.sleep(delay / 1e9)
        if not self.stopped():
            await self.send(r, t0 + off)

    async def run(self, t0: int, *, streams: int = 0, arrivals: Sequence[tuple[GenerationRequest, int]] = (),
                  jobs: Sequence[Coroutine[object, object, None]] = ()) -> bool:
        """``streams`` closed-loop streams, ``arrivals`` (request, offset from ``t0``) sent on time, or
        ``jobs`` (compare/running/sessions.py: each sends through ``send``), until done or stopped.
        True when cancelled from outside (the run is being stopped): sending stops, measured is kept."""
        tasks = [asyncio.create_task(closed_loop_stream(self._pop, self._pop_early, self.source.started,
                                                        self.send, self.stopped)) for _ in range(streams)]
        tasks += [asyncio.create_task(c) for c in [*(self._timed(t0, r, o) for r, o in arrivals), *jobs]]
        stopper = asyncio.create_task(self._stop.wait())
        # one future for "all tasks done (or one crashed)": O(1) per finished task; re-waiting on
        # the whole pending set each time one finishes is O(n^2) and stalls the loop at 2000 streams
        all_done = asyncio.get_running_loop().create_future()
        left = len(tasks)

        def on_done(t: asyncio.Task) -> None:
            nonlocal left
            left -= 1
            if all_done.done():
                return
            if not t.cancelled() and t.exception() is not None:
                all_done.set_exception(t.exception())  # a bug, not a request failure
            elif left == 0:
                all_done.set_result(None)

        for t in tasks:
            t.add_done_callback(on_done)
        if not tasks:
            all_done.set_result(None)
        interrupted = False
        try:
            await asyncio.wait({all_done, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if all_done.done():
                all_done.result()
        except asyncio.CancelledError:
            interrupted = True
            self._stop.set()
        finally:
            stopper.cancel()
            await _cancel_all(tasks)
        return interrupted


async def run_level(backend: Backend, requests: list[GenerationRequest], level: LoadLevel, *,
                    seed: int, timeout_s: float, max_errors: int,
                    on_record: Callable[[RequestRecord], None] | None = None,
                    offsets_ns: list[int] | None = None) -> LevelOutcome:
    """Send ``requests`` at ``level``; returns every record, including failed ones. ``offsets_ns``:
    open-loop arrivals given as they are (a shard of a level's schedule) instead of drawn from ``seed``."""
    with gc_quiet():  # entered before the level's clock starts: the collection is not part of it
        return await _run_level(backend, requests, level, seed=seed, timeout_s=timeout_s,
                                max_errors=max_errors, on_record=on_record, offsets_ns=offsets_ns)


async def _run_level(backend: Backend, requests: list[GenerationRequest], level: LoadLevel, *,
                     seed: int, timeout_s: float, max_errors: int,
                     on_record: Callable[[RequestRecord], None] | None,
                     offsets_ns: list[int] | None = None) -> LevelOutcome:
    records: list[RequestRecord] = []
    offsets = None

    def keep(rec: RequestRecord) -> None:
        records.append(rec)
        if on_record:
            on_record(rec)

    t0 = time.perf_counter_ns()
    with LoopLagMonitor() as lag:
        if level.kind == "concurrency":
            streams = min(int(level.value), len(requests))
            loop = LevelLoop(backend, level.label, LocalSource(requests, streams, max_errors), timeout_s, keep)
            interrupted = await loop.run(t0, streams=streams)
        else:
            offsets = list(offsets_ns) if offsets_ns is not None else level_offsets_ns(level, len(requests), seed)
            loop = LevelLoop(backend, level.label, LocalSource([], 0, max_errors), timeout_s, keep)
            interrupted = await loop.run(t0, arrivals=list(zip(requests, offsets)))
    return level_outcome(level, records, t0, offsets, lag, loop, len(requests), interrupted)


def level_outcome(level: LoadLevel, records: list[RequestRecord], t0: int, offsets: list[int] | None,
                  lag: LoopLagMonitor, loop: LevelLoop, planned: int, interrupted: bool) -> LevelOutcome:
    """A level's outcome (raised in LevelInterrupted when a signal stopped it)."""
    outcome = LevelOutcome(level=level, records=records, t_start_ns=t0, t_end_ns=time.perf_counter_ns(),
                           schedule_offsets_ns=offsets, loop_lag_ms=lag.summary(), lag_samples=lag.samples(),
                           aborted=loop.aborted[0] if loop.aborted else None, planned=planned)
    if interrupted:
        raise LevelInterrupted(outcome)
    return outcome


async def _cancel_all(tasks: list[asyncio.Task], grace_s: float = CANCEL_GRACE_S) -> None:
    """Cancel what is in flight (each keeps its partial record as it unwinds), waiting at most
    ``grace_s`` for them to end: a stop must not hang on a backend that does not answer."""
    live = [t for t in tasks if not t.done()]
    for t in live:
        t.cancel()
    if live:
        await asyncio.wait(live, timeout=grace_s)

