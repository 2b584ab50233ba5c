"""Sending multi-turn sessions: a session's turns in order, each one its think time after the
reply before it ended (compare/workload/sessions.py builds them).

- ``concurrency=C``: C streams; each takes the next whole session and runs its turns one after
  the other (a closed loop of sessions, like C users chatting at once).
- ``rate=R``: sessions start at seeded Poisson offsets (R sessions/s); their later turns follow
  their replies, however late those are (open loop over session starts).

A turn is due when the previous reply's last token arrived plus its think time; how late it left
against that is its send delay, as for any request. A failed turn ends its session: its later
turns are not sent (they would follow a reply the user never saw).
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Callable

from backends.base import Backend
from compare.running.executor import (LevelLoop, LevelOutcome, LocalSource, LoopLagMonitor, gc_quiet,
                                      level_outcome)
from compare.workload.schedule import LoadLevel, level_offsets_ns
from compare.workload.sessions import group_sessions
from core.records import GenerationRequest, RequestRecord


async def run_session_level(backend: Backend, requests: list[GenerationRequest], level: LoadLevel, *,
                            seed: int, timeout_s: float, max_errors: int,
                            on_record: Callable[[RequestRecord], None] | None = None) -> LevelOutcome:
    """Send the sessions of ``requests`` at ``level``; every record comes back, failed ones too."""
    with gc_quiet():
        return await _run(backend, requests, level, seed=seed, timeout_s=timeout_s, max_errors=max_errors,
                          on_record=on_record)


async def _run(backend: Backend, requests: list[GenerationRequest], level: LoadLevel, *, seed: int,
               timeout_s: float, max_errors: int, on_record: Callable[[RequestRecord], None] | None) -> LevelOutcome:
    records: list[RequestRecord] = []

    def keep(rec: RequestRecord) -> None:
        records.append(rec)
        if on_record:
            on_record(rec)

    sessions = group_sessions(requests)
    offsets = None
    t0 = time.perf_counter_ns()
    with LoopLagMonitor() as lag:
        loop = LevelLoop(backend, level.label, LocalSource([], 0, max_errors), timeout_s, keep)
        if level.kind == "concurrency":
            queue = deque(sessions)
            jobs = [_stream(loop, queue) for _ in range(min(int(level.value), len(sessions)))]
        else:
            offsets = level_offsets_ns(level, len(sessions), seed)  # the level's arrival process
            jobs = [_session(loop, turns, t0 + off, open_loop=True) for turns, off in zip(sessions, offsets)]
        interrupted = await loop.run(t0, jobs=jobs)
    return level_outcome(level, records, t0, offsets, lag, loop, len(requests), interrupted)


async def _stream(loop: LevelLoop, queue: deque[list[GenerationRequest]]) -> None:
    """One closed-loop stream: whole sessions, one after the other, until none is left."""
    while queue and not loop.stopped():
        await _session(loop, queue.popleft(), time.perf_counter_ns(), open_loop=False)


async def _session(loop: LevelLoop, turns: list[GenerationRequest], t_start_ns: int, *, open_loop: bool) -> None:
    ready = t_start_ns
    for r in turns:
        due = ready + int(r.think_time_s * 1e9) if r.turn else ready
        # loop until due: timers may fire early, and a turn must never leave before its time
        while (delay := due - time.perf_counter_ns()) > 0:
            await asyncio.sleep(delay / 1e9)
        if loop.stopped():
            return
        rec = await (loop.send(r, t_scheduled_ns=due) if open_loop else loop.send(r, t_ready_ns=due))
        if not rec.ok:
            return
        ready = rec.event_times_ns[-1] if rec.event_times_ns else rec.t_end_ns
