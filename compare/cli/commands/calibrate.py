"""``compare calibrate``: how precisely does our HTTP client timestamp streams on this machine,
and how many concurrent streams can one client process ingest before its stamps go bad?

Streams from a loopback server with known TTFT/ITL (compare/running/calibration/server.py) go through the exact
client path of ``compare run`` (HttpStreamBackend + the executor). Per stream count it reports
the timing error (client stamp - server send stamp) and the ingest rate; the largest count that
is *sustainable* (every request ok, >= 90 % of the offered events/s ingested, p99 error within
--max-error-ms) is the client's capacity.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from compare.running import aio
from core.errors import UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure the HTTP client's timing error and max sustainable streams")
    p.add_argument("--streams", default="100,500,1000,2000", help="concurrent stream counts to try (ascending)")
    p.add_argument("--tokens", type=int, default=50, help="tokens per stream")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=40.0)
    p.add_argument("--tokens-per-event", type=int, default=1)
    p.add_argument("--max-error-ms", type=float, default=1.0, help="p99 timing error a sustainable level may have")
    p.add_argument("--no-pin", action="store_true", help="do not pin client and server to separate CPUs")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--tgi-clients", action="store_true",
                   help="instead: TGI's /generate_stream through both TGI clients (stamped reader vs "
                        "text-generation's AsyncClient), the timing error of each")
    p.set_defaults(func=_calibrate)


def _args(a: argparse.Namespace) -> list[int]:
    try:
        streams = [int(s) for s in a.streams.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"--streams {a.streams!r}: give whole numbers, e.g. --streams 100,500,1000") from None
    if not streams or min(streams) <= 0:
        raise UserError("--streams needs positive stream counts, e.g. --streams 100,500,1000")
    if a.tokens <= 0 or a.tokens_per_event <= 0:
        raise UserError("--tokens and --tokens-per-event must be > 0")
    if a.ttft_ms < 0 or a.itl_ms <= 0:
        raise UserError("--ttft-ms must be >= 0 and --itl-ms > 0")
    if a.max_error_ms <= 0:
        raise UserError("--max-error-ms must be > 0 (the p99 timing error a sustainable level may have)")
    return sorted(streams)


def _cpus(no_pin: bool) -> tuple[set[int] | None, str]:
    cpus = sorted(os.sched_getaffinity(0))
    if no_pin or len(cpus) < 2:
        return None, ""
    return {cpus[0]}, ",".join(str(c) for c in cpus[1:])


def run_calibration(streams: list[int], tokens: int, ttft_ms: float, itl_ms: float, tokens_per_event: int,
                    max_error_ms: float, no_pin: bool = False, on_result=None) -> dict:
    from compare.running.calibration import CalibrationServerProcess, CalibrationTiming, raise_nofile
    from compare.running.calibration.client import measure

    raise_nofile()
    client_cpus, server_cpus = _cpus(no_pin)
    before = os.sched_getaffinity(0)
    timing = CalibrationTiming(ttft_ms, itl_ms, tokens_per_event)
    results, best = [], 0
    with CalibrationServerProcess(timing, cpus=server_cpus) as url:
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        try:
            for n in streams:
                r = aio.run(measure(url, n, tokens, timeout_s=60 + 3 * tokens * itl_ms / 1e3))
                offered = n * 1e3 / itl_ms
                r["offered_events_per_s"] = offered
                r["offered_tokens_per_s"] = offered * tokens_per_event
                r["steady_tokens_per_s"] = r["steady_events_per_s"] * tokens_per_event
                r["sustainable"] = (r["ok"] == r["requests"] and r["steady_events_per_s"] >= 0.9 * offered
                                    and r["timing_error_ms"]["p99"] <= max_error_ms)
                if r["sustainable"]:
                    best = n
                results.append(r)
                if on_result:
                    on_result(r)
        finally:
            if client_cpus:
                os.sched_setaffinity(0, before)
    return {"timing": {"ttft_ms": ttft_ms, "itl_ms": itl_ms, "tokens_per_event": tokens_per_event,
                       "tokens_per_stream": tokens},
            "client_cpus": sorted(client_cpus) if client_cpus else "unpinned", "server_cpus": server_cpus or "unpinned",
            "max_error_ms": max_error_ms, "levels": results, "max_sustainable_streams": best,
            "load_avg": os.getloadavg()}


def tgi_clients(streams: list[int], tokens: int, ttft_ms: float, itl_ms: float, no_pin: bool = False) -> list[dict]:
    """Both TGI clients (backends/http/tgi_client.py) at each stream count, same server, same timing."""
    from compare.running.calibration import CalibrationServerProcess, CalibrationTiming, raise_nofile
    from compare.running.calibration.tgi import measure_tgi

    raise_nofile()
    client_cpus, server_cpus = _cpus(no_pin)
    out = []
    with CalibrationServerProcess(CalibrationTiming(ttft_ms, itl_ms, 1), cpus=server_cpus) as url:
        for n in streams:
            for client in ("stamped", "text-generation"):
                out.append(aio.run(measure_tgi(url, n, tokens, client, timeout_s=60 + 3 * tokens * itl_ms / 1e3)))
    return out


def _calibrate(a: argparse.Namespace) -> int:
    streams = _args(a)
    if a.tgi_clients:
        rows = tgi_clients(streams, a.tokens, a.ttft_ms, a.itl_ms, a.no_pin)
        if a.json:
            print(json.dumps(rows, indent=2))
        for r in rows:
            e = r["timing_error_ms"]
            print(f"{r['client']:>16} {r['streams']:>5} streams: {r['events']} events, failed {r['failed'] or 0}, "
                  f"error p50 {e['p50']:.3f} ms p99 {e['p99']:.3f} ms max {e['max']:.3f} ms", file=sys.stderr)
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=a.json)

    def show(r: dict) -> None:
        e = r["timing_error_ms"]
        console.print(f"  {r['streams']:>5} streams: {r['ok']}/{r['requests']} ok, {r['steady_tokens_per_s']:,.0f} tok/s "
                      f"ingested (offered {r['offered_tokens_per_s']:,.0f}), error p50 {e['p50']:.3f} ms p99 "
                      f"{e['p99']:.3f} ms, loop lag max {r['loop_lag_ms'].get('max', 0):.1f} ms "
                      f"{'✓' if r['sustainable'] else '✗'}")

    console.print(f"calibrating against a loopback server: TTFT {a.ttft_ms} ms, ITL {a.itl_ms} ms, "
                  f"{a.tokens_per_event} token(s)/event, load average {os.getloadavg()[0]:.1f}")
    out = run_calibration(streams, a.tokens, a.ttft_ms, a.itl_ms, a.tokens_per_event, a.max_error_ms, a.no_pin, show)
    if a.json:
        print(json.dumps(out, indent=2))
        return 0
    t = Table(title="client timing self-check")
    for c in ("streams", "ok", "tok/s ingested", "offered", "err p50 ms", "err p99 ms", "err max ms", "lag max ms", "ok?"):
        t.add_column(c, justify="right")
    for r in out["levels"]:
        e = r["timing_error_ms"]
        t.add_row(str(r["streams"]), f"{r['ok']}/{r['requests']}", f"{r['steady_tokens_per_s']:,.0f}",
                  f"{r['offered_tokens_per_s']:,.0f}", f"{e['p50']:.3f}", f"{e['p99']:.3f}", f"{e['max']:.3f}",
                  f"{r['loop_lag_ms'].get('max', 0):.1f}", "✓" if r["sustainable"] else "✗")
    console.print(t)
    console.print(f"max sustainable streams (p99 error <= {a.max_error_ms} ms): {out['max_sustainable_streams']}"
                  f"; client CPU {out['client_cpus']}, server CPU {out['server_cpus']}")
    clock = (out["levels"][-1].get("event_clock") or {}) if out["levels"] else {}
    if clock:  # what stamped the events and who read the sockets (the same words as run.json)
        console.print(f"stamps: {clock.get('source', '?')}; reads: {clock.get('reader', 'the event loop')}"
                      + (f"; longest wait of a read in its socket {clock['read_delay_max_ms']} ms"
                         if "read_delay_max_ms" in clock else ""))
    return 0
