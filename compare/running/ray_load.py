"""Load-generator shards as Ray actors: ``compare run --ray ADDR --ray-load-shards N`` for an
already running endpoint (``openai@URL``, ``tgi@URL``) that outgrows one client host.

Each level is sent by N actors, spread over the cluster's nodes (``SPREAD``, one CPU each), each
with its own HTTP client to the one endpoint:

- closed loop: the level's concurrency is divided among them (c=10 over 4: 3,3,2,2 streams) and the
  requests are dealt round-robin (request i to shard i mod N), each shard draining its own share;
- open loop: the one seeded arrival schedule of the whole level is kept and its arrivals dealt
  round-robin, each sent at the shared start + its own offset.

Hosts do not share a clock. Before each level the driver measures every shard's wall-clock offset
to its own by ping-pong (16 round trips through Ray; the one with the shortest round trip gives
``offset = t_shard - (t_sent + t_back) / 2``, known to within half that round trip), then picks a
start instant on its clock, one second ahead, which each shard converts to its own clock. A shard
whose offset is known less precisely than ``--ray-max-clock-error-ms`` (default 5 ms) is refused:
the level fails with one line saying so and nothing is sent, because its arrivals could not be
placed on the shared schedule to that precision. The records come back on each shard's
``perf_counter_ns`` and are moved onto the driver's clock with the same offset, so requests.jsonl
has one timeline; run.json ``ray.load_shards`` keeps each shard's node, offset, its error, the round
trip and how far its actual start was from the shared one (``start_skew_ms``).
"""
from __future__ import annotations

import asyncio
import gc
import os
import socket
import time
from dataclasses import replace
from typing import Any, Callable

from backends.base import Backend
from backends.http.urls import redact_url
from core.records import GenerationRequest, RequestRecord
from core.results.evolve import evolve
from compare.running.executor import LevelOutcome, RunAborted, run_level
from compare.running.partition import partition
from compare.workload.schedule import LoadLevel

PINGS = 16
LEAD_S = 1.0  # the shared start is this far ahead of the moment it is chosen


class LoadShard:
    """One load generator (a Ray actor): its own HTTP client to the endpoint."""

    def __init__(self, target: Any, spec: Any) -> None:
        from backends import registry

        self.backend = registry.build(target, spec)

    async def open(self) -> dict[str, Any]:
        import ray

        await self.backend.__aenter__()
        return {"node_id": ray.get_runtime_context().get_node_id()[:12], "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "pid": os.getpid()}

    def clock(self) -> int:
        return time.time_ns()

    async def run(self, requests: list[GenerationRequest], level: LoadLevel, offsets: list[int] | None,
                  start_wall_ns: int, timeout_s: float, max_errors: int) -> tuple[LevelOutcome, int, int, float]:
        arrived_ms = (time.time_ns() - start_wall_ns) / 1e6  # > 0: the call came after the start
        # collected and frozen now, so that the level's own collection (executor.gc_quiet) finds
        # almost nothing to walk: a full collection of a Ray worker's heap took 0.2-0.7 s here
        gc.collect()
        gc.freeze()
        while (left := start_wall_ns - time.time_ns()) > 2_000_000:
            await asyncio.sleep(min((left - 1_000_000) / 1e9, 0.05))
        while time.time_ns() < start_wall_ns:  # the last 2 ms: timers fire early or late by ~1 ms
            await asyncio.sleep(0)
        wall_ref, perf_ref = time.time_ns(), time.perf_counter_ns()
        outcome = await run_level(self.backend, requests, level, seed=0, timeout_s=timeout_s,
                                  max_errors=max_errors, offsets_ns=offsets)
        return outcome, wall_ref, perf_ref, arrived_ms

    async def close(self) -> None:
        await self.backend.__aexit__(None, None, None)


async def clock_offset(actor: Any, pings: int = PINGS) -> tuple[int, int]:
    """(offset of the actor's wall clock to ours, half the shortest round trip), in ns."""
    best = None
    for _ in range(pings):
        t0 = time.time_ns()
        ts = await actor.clock.remote()
        t1 = time.time_ns()
        if best is None or t1 - t0 < best[0]:
            best = (t1 - t0, ts - (t0 + t1) // 2)
    assert best is not None
    return best[1], best[0] // 2


def split(level: LoadLevel, n_requests: int, shards: int, seed: int
          ) -> tuple[list[tuple[list[int], LoadLevel, list[int] | None]], list[int] | None]:
    """Per shard: (request indexes, its level, its arrival offsets or None); and the level's
    schedule (open loop)."""
    if level.kind == "concurrency":
        n = max(1, min(shards, int(level.value), n_requests))
        parts, _ = partition(level, n_requests, n, seed)
        return [(list(p.requests), LoadLevel("concurrency", p.streams), None) for p in parts], None
    parts, offsets = partition(level, n_requests, max(1, min(shards, n_requests)), seed)
    return [(list(p.requests), level, p.offsets_ns) for p in parts], offsets


def _shift(rec: RequestRecord, d: int, label: str) -> RequestRecord:
    """A shard's record on the driver's clock, under the level's label (a closed-loop shard ran
    its share of the concurrency: c2 of c4)."""
    return replace(rec, level=label, t_sent_ns=rec.t_sent_ns + d, t_end_ns=rec.t_end_ns + d,
                   t_scheduled_ns=None if rec.t_scheduled_ns is None else rec.t_scheduled_ns + d,
                   event_times_ns=tuple(t + d for t in rec.event_times_ns))


async def run_level_shards(cfg: Any, backend: Backend, level: LoadLevel, writer: Any, max_errors: int,
                           on_record: Callable[[RequestRecord], None]) -> LevelOutcome:
    import ray

    from compare.running.ray_cluster import cluster_section, connect

    so = cfg.scaleout
    connect(so.address)
    if writer.results.ray is None:
        writer.update(ray=cluster_section(ray, so.address))
    target = next(t for t in cfg.backends if redact_url(str(t)) == backend.name)
    planned = len(level.take(cfg.requests))  # --requests-per-stream: the level's prefix of the workload
    parts, offsets = split(level, planned, so.load_shards, cfg.workload.seed)
    cls = ray.remote(num_cpus=1, max_restarts=0)(LoadShard)
    actors = [cls.options(scheduling_strategy="SPREAD").remote(target, cfg.spec_for(str(target))) for _ in parts]
    try:
        nodes = await asyncio.gather(*(a.open.remote() for a in actors))
        clocks = [await clock_offset(a) for a in actors]
        info = [{**node, "offset_ms": round(off / 1e6, 3), "error_ms": round(err / 1e6, 3),
                 "requests": len(idx), **({"concurrency": int(lv.value)} if lv.kind == "concurrency" else {})}
                for node, (off, err), (idx, lv, _) in zip(nodes, clocks, parts)]
        entry = {"backend": backend.name, "level": level.label, "shards": info}
        section = writer.results.ray
        at = len(section.load_shards)  # this level's entry; its start skews are put in after the level
        writer.update(ray=evolve(section, load_shards=[*section.load_shards, entry]))
        bad = [s for s in info if s["error_ms"] > so.max_clock_error_ms]
        if bad:
            raise RunAborted(
                f"load shard on {bad[0]['ip']} refused: its clock offset ({bad[0]['offset_ms']:+.3f} ms) is known "
                f"only to +-{bad[0]['error_ms']:.3f} ms, above --ray-max-clock-error-ms {so.max_clock_error_ms:g}")
        start_wall = time.time_ns() + int(LEAD_S * 1e9)  # on the driver's clock
        drv_wall, drv_perf = time.time_ns(), time.perf_counter_ns()
        runs = await asyncio.gather(*(
            a.run.remote([cfg.requests[i] for i in idx], lv, offs, start_wall + off, cfg.timeout_s, max_errors)
            for a, (idx, lv, offs), (off, _) in zip(actors, parts, clocks)))
    finally:
        await asyncio.gather(*(a.close.remote() for a in actors), return_exceptions=True)
        for a in actors:
            ray.kill(a)
    records, starts, ends, lags, aborted = [], [], [], [], []
    for (outcome, wall_ref, perf_ref, arrived_ms), (off, _), s in zip(runs, clocks, info):
        d = (wall_ref - perf_ref) - off - drv_wall + drv_perf  # shard perf -> driver perf
        records += [_shift(r, d, level.label) for r in outcome.records]
        starts.append(outcome.t_start_ns + d)
        ends.append(outcome.t_end_ns + d)
        s["start_skew_ms"] = round((outcome.t_start_ns + d - (drv_perf + start_wall - drv_wall)) / 1e6, 3)
        if arrived_ms > 0:
            s["late_call_ms"] = round(arrived_ms, 3)  # the start order reached it after the start
        lags.append(outcome.loop_lag_ms)
        if outcome.aborted:
            aborted.append(f"shard on {s['ip']}: {outcome.aborted}")
    section = writer.results.ray
    writer.update(ray=evolve(section, load_shards=[*section.load_shards[:at], {**entry, "shards": info},
                                                   *section.load_shards[at + 1:]]))
    records.sort(key=lambda r: r.t_end_ns)  # the order one client would have written them
    for r in records:
        on_record(r)
    failed = sum(not r.ok for r in records)
    if not aborted and failed > max_errors:
        aborted.append(f"{failed} failed requests exceed --max-errors {max_errors}")
    return LevelOutcome(level=level, records=records, t_start_ns=min(starts), t_end_ns=max(ends),
                        schedule_offsets_ns=offsets,
                        loop_lag_ms={"max": max(x.get("max", 0.0) for x in lags),
                                     "p99": max(x.get("p99", 0.0) for x in lags),
                                     "samples": sum(int(x.get("samples", 0)) for x in lags)},
                        aborted=aborted[0] if aborted else None, planned=planned)
