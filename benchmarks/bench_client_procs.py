"""Benchmark: the offered load 1, 2, ... client processes can follow (``compare run --client-procs``).

The loopback calibration server (compare/running/calibration/server.py: known TTFT and ITL; one process
pinned to the last allowed CPU, or ``--server-procs K`` processes on the last K CPUs sharing its port) streams to the exact client path of ``compare run``: one process
through ``executor.run_level``, N processes through ``multiproc.run_level_procs`` (the same
records, merged). Every level is closed loop with as many streams as requests, each request
``--tokens`` tokens at ``--itl-ms``, so the offered load is streams / ITL events per second.

A client follows an offer when it ingests >= 90 % of it (tokens over the level's wall time against
the server's nominal duration; with ``--rounds`` > 1 the steady rate, the middle 60 % of the
arrivals), every request is ok, its ITL p99 stays within ``--itl-slack-ms`` of the server's ITL
(kernel stamps merge when a read comes a whole ITL late) and it sent on time: with ``--rounds`` > 1
the send delay p99 of every stream's later requests within the coordinated-omission threshold
(10 ms), else no client event loop lagged more than 50 ms (the tool's own lag threshold).

Prints one table: processes x streams -> offered and ingested tokens/s, ITL p50/p99, worst loop
lag, CPU per client process, and the highest offer each process count followed. On a 2-core
machine two client processes cannot double anything (they share the one core the server leaves);
the table is meant for a machine with cores to spare (16 on the GPU host).

    .venv/bin/python benchmarks/bench_client_procs.py [--procs 1,2,4] [--streams 250,500,1000,2000,4000]
        [--tokens 64] [--itl-ms 20] [--rounds 1] [--server-procs 1] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backends.http_backends import HttpStreamBackend  # noqa: E402
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming, raise_nofile  # noqa: E402
from compare.analysis.metrics import COORDINATED_OMISSION_MS  # noqa: E402
from compare.running import aio  # noqa: E402
from compare.running.executor import run_level  # noqa: E402
from compare.running.multiproc import run_level_procs  # noqa: E402
from compare.workload.schedule import LoadLevel  # noqa: E402
from core.records import GenerationRequest  # noqa: E402

LAG_LIMIT_MS = 50.0


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def resent(records: list) -> list:
    """A stream's later requests: those due when another record's response ended (the executor's
    closed loop sets t_ready_ns to it); a stream's first request waited on the level's start."""
    ends = {r.event_times_ns[-1] if r.event_times_ns else r.t_end_ns for r in records}
    return [r for r in records if r.t_ready_ns in ends and r.send_lateness_ns is not None]


def _steady(o) -> float:
    """Tokens/s read in the middle 60 % of the level's arrival stamps: the rate once every stream
    runs, without the level's start (connects) and drain."""
    t = sorted(t for r in o.records for t, n in zip(r.event_times_ns, r.event_token_counts) for _ in range(n))
    if len(t) < 10:
        return 0.0
    lo, hi = t[len(t) // 5], t[len(t) * 4 // 5]
    return (len(t) * 3 // 5) / ((hi - lo) / 1e9) if hi > lo else 0.0


async def one_level(url: str, procs: int, streams: int, tokens: int, timeout_s: float, rounds: int = 1) -> dict:
    reqs = [GenerationRequest(request_id=f"b{i:06d}", max_tokens=tokens, prompt_token_ids=(1, 2, 3, 4))
            for i in range(streams * rounds)]
    level = LoadLevel("concurrency", streams)
    async with HttpStreamBackend(None, "bench", base_url=url, metrics=None) as b:
        if procs == 1:
            cpu0 = os.times()
            o = await run_level(b, reqs, level, seed=0, timeout_s=timeout_s, max_errors=len(reqs))
            cpu1 = os.times()
            wall = (o.t_end_ns - o.t_start_ns) / 1e9
            cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
            per_proc = [{"cpu_util": round(cpu / wall, 2) if wall else None, "loop_lag_ms": o.loop_lag_ms,
                         "event_clock": b.describe().extra.get("event_clock")}]
        else:
            o = await run_level_procs(b, reqs, level, procs=procs, seed=0, timeout_s=timeout_s, max_errors=len(reqs))
            per_proc = o.client_procs["processes"] if o.client_procs else []
    wall = (o.t_end_ns - o.t_start_ns) / 1e9
    itl = [(b_ - a_) / 1e6 for r in o.records if r.ok for a_, b_ in zip(r.event_times_ns, r.event_times_ns[1:])]
    got = sum(len(r.token_ids) for r in o.records)
    # a stream's later requests: due when the response before ended (the first ones wait on the start)
    late = [r.send_lateness_ns / 1e6 for r in resent(o.records)]
    clocks = [p.get("event_clock") or {} for p in per_proc]
    return {"procs": procs, "streams": streams, "rounds": rounds, "ok": sum(r.ok for r in o.records),
            "requests": len(reqs), "aborted": o.aborted, "wall_s": round(wall, 3), "tokens": got,
            "ingested_tok_s": round(got / wall) if wall else 0, "steady_tok_s": round(_steady(o)),
            "itl_p50_ms": round(_pct(itl, 0.5), 2), "itl_p99_ms": round(_pct(itl, 0.99), 2),
            "resend_late_p99_ms": round(_pct(late, 0.99), 2) if late else None,
            # the receive thread's longest wait of a read in its socket: above one ITL, two events shared a stamp
            "read_delay_max_ms": max((c.get("read_delay_max_ms") or 0.0) for c in clocks) if clocks else None,
            "thread_sent": sum(c.get("thread_sent") or 0 for c in clocks),
            "lag_max_ms": max((p.get("loop_lag_ms") or {}).get("max", 0.0) for p in per_proc) if per_proc else None,
            "cpu_util": [p.get("cpu_util") for p in per_proc]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", default="1,2")
    p.add_argument("--streams", default="250,500,1000,2000")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1, help="requests per stream, one after another (closed loop); "
                   "with more than 1, 'ingested' is the steady rate (middle 60 %% of the arrivals)")
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-slack-ms", type=float, default=5.0, help="ITL p99 allowed above the server's ITL")
    p.add_argument("--server-procs", type=int, default=1,
                   help="loopback server processes sharing its port, on the last CPUs (one each); the clients get the rest")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--json", metavar="OUT")
    a = p.parse_args()
    raise_nofile()
    cpus = sorted(os.sched_getaffinity(0))
    k = min(a.server_procs, len(cpus) - 1) if len(cpus) > 1 else 0
    server_cpu = ",".join(str(c) for c in cpus[-k:]) if k else ""
    if server_cpu:  # the clients (and their processes, which inherit it) on every other CPU
        os.sched_setaffinity(0, set(cpus[:-k]))
    timing = CalibrationTiming(a.ttft_ms, a.itl_ms, 1)
    nominal_s = (a.ttft_ms + a.tokens * a.itl_ms) / 1e3  # one request, undisturbed
    rows = []
    with CalibrationServerProcess(timing, cpus=server_cpu, procs=max(k, 1)) as url:
        for procs in [int(x) for x in a.procs.split(",")]:
            for streams in [int(x) for x in a.streams.split(",")]:
                r = aio.run(one_level(url, procs, streams, a.tokens, a.timeout, a.rounds))  # (uvloop, as compare run)
                r["offered_tok_s"] = round(streams * a.tokens / nominal_s)
                if a.rounds > 1:  # (one round is all start and drain: tokens over the level's wall time)
                    r["ingested_tok_s"] = r["steady_tok_s"]
                # kept up: every token read, stamps one per event (ITL), and -- with several rounds --
                # every later request left on time (closed loop); else the event loop's lag stands in
                on_time = (r["resend_late_p99_ms"] <= COORDINATED_OMISSION_MS if r["resend_late_p99_ms"] is not None
                           else (r["lag_max_ms"] or 0.0) <= LAG_LIMIT_MS)
                r["follows"] = (r["ok"] == r["requests"] and r["ingested_tok_s"] >= 0.9 * r["offered_tok_s"]
                                and r["itl_p99_ms"] <= a.itl_ms + a.itl_slack_ms and on_time)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
                time.sleep(1.0)
    head = (f"{'procs':>5} {'streams':>7} {'offered':>9} {'ingested':>9} {'ok':>11} {'ITL p50':>7} "
            f"{'ITL p99':>7} {'resend p99':>10} {'read max':>8} {'lag max':>7}  {'CPU/proc':<16} follows")
    print(f"client processes vs offered load: loopback server ITL {a.itl_ms:g} ms, {a.tokens} tokens/request, "
          f"{a.rounds} request(s) per stream, "
          f"{len(cpus)} CPUs ({f'server: {max(k, 1)} process(es) on CPU ' + server_cpu if server_cpu else 'server unpinned'}), "
          f"{platform.node()}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(head)
    print("-" * len(head))
    for r in rows:
        cpu = ",".join(f"{c:.2f}" for c in r["cpu_util"] if c is not None)
        print(f"{r['procs']:>5} {r['streams']:>7} {r['offered_tok_s']:>9,} {r['ingested_tok_s']:>9,} "
              f"{str(r['ok']) + '/' + str(r['requests']):>11} {r['itl_p50_ms']:>7.2f} {r['itl_p99_ms']:>7.2f} "
              f"{r['resend_late_p99_ms'] if r['resend_late_p99_ms'] is not None else '-':>10} "
              f"{r['read_delay_max_ms'] if r['read_delay_max_ms'] is not None else '-':>8} "
              f"{(r['lag_max_ms'] or 0):>7.1f}  {cpu:<16} {'yes' if r['follows'] else 'NO'}")
    print("tokens/s; ITL, send delay of a stream's later requests (p99), the receive thread's longest read delay "
          "and loop lag in ms; CPU/proc: CPU seconds per wall second of each client process")
    for procs in sorted({r["procs"] for r in rows}):
        ok = [r["offered_tok_s"] for r in rows if r["procs"] == procs and r["follows"]]
        print(f"{procs} client process(es) follow up to {max(ok):,} tokens/s offered" if ok
              else f"{procs} client process(es) follow none of the offers")
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
