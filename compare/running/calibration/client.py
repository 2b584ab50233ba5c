"""The calibration measurement, client side: how well our HTTP client (the exact code path of
``compare run``) stamps the loopback calibration server's events (compare/running/calibration/server.py)."""
from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

from compare.running.calibration.server import cpu_times


async def measure(base_url: str, streams: int, tokens: int, rounds: int = 1, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run ``streams`` concurrent streams of ``tokens`` tokens through HttpStreamBackend and the
    runner's executor; compare every token event's client stamp with the server's send stamp."""
    import numpy as np

    from core.records import GenerationRequest
    from backends.http_backends import HttpStreamBackend
    from compare.running.executor import run_level
    from compare.workload.schedule import LoadLevel

    pairs_srv: list[Any] = []  # the server's send stamps as sent (converted after the level)
    pairs_cli: list[int] = []  # the events' stamps (what the records carry)
    pairs_rx: list[int | None] = []  # when Python read them (None: same as the stamp)

    def observe(rid: str, raw: Any) -> None:  # runs per event inside the measured level: keep it lean
        if raw.id is not None:
            pairs_srv.append(raw.id)
            pairs_cli.append(raw.t_ns)
            pairs_rx.append(raw.rx_ns)

    reqs = [GenerationRequest(request_id=f"cal-{i}", max_tokens=tokens, prompt_token_ids=(1, 2, 3))
            for i in range(streams * rounds)]
    backend = HttpStreamBackend(None, "calibration", protocol="openai", base_url=base_url, metrics=None,
                                max_connections=streams + 16)
    backend.raw_observer = observe  # and per request for streams the receive thread parsed (compare run's path):
    backend.batch_observer = lambda rid, t, rx, sids: (pairs_srv.extend(sids), pairs_cli.extend(t), pairs_rx.extend(rx))
    async with backend:
        srv0 = await server_stats(base_url)
        gc.collect()  # run_level collects and freezes the heap too; this one stays out of the CPU count
        cpu0 = cpu_times()
        try:
            out = await run_level(backend, reqs, LoadLevel("concurrency", streams), seed=0, timeout_s=timeout_s,
                                  max_errors=len(reqs))
        finally:
            cpu1 = cpu_times()
        srv1 = await server_stats(base_url)
        clock = backend.describe().extra.get("event_clock", {})
    srv = np.asarray([int(x) for x in pairs_srv], dtype=np.int64)
    cli = np.asarray(pairs_cli, dtype=np.int64)
    rx = np.asarray([c if r is None else r for c, r in zip(pairs_cli, pairs_rx)], dtype=np.int64)
    err_ms = (cli - srv) / 1e6
    user_err_ms = (rx - srv) / 1e6
    recs = out.records
    ok = [r for r in recs if r.ok]
    n_tok = sum(r.output_tokens for r in ok)
    # steady-state ingest rate: the middle 60 % of the time the client was reading events (no
    # ramp-up/down); by read time, not receive stamp (that would be the server's send rate)
    rate = 0.0
    if rx.size > 10:
        lo, hi = np.percentile(rx, [20, 80])
        if hi > lo:
            rate = float(((rx >= lo) & (rx <= hi)).sum()) / ((hi - lo) / 1e9)
    # the records the runner keeps must be the very stamps the observer saw (same code path)
    consistent = sum(len(r.event_times_ns) for r in recs) == cli.size
    def dist(x: Any) -> dict[str, float]:
        if not x.size:
            return {k: float("nan") for k in ("p50", "p90", "p99", "p999", "max", "min")}
        p50, p90, p99, p999 = (float(v) for v in np.percentile(x, [50, 90, 99, 99.9]))
        return {"p50": p50, "p90": p90, "p99": p99, "p999": p999, "max": float(x.max()), "min": float(x.min())}

    return {
        "streams": streams, "tokens_per_stream": tokens, "requests": len(recs), "ok": len(ok),
        "errors": {k: sum(1 for r in recs if r.error_kind == k) for k in {r.error_kind for r in recs if r.error_kind}},
        "events": int(cli.size), "tokens": n_tok,
        "wall_s": (out.t_end_ns - out.t_start_ns) / 1e9,
        "steady_events_per_s": rate,
        "event_clock": clock,  # which clock stamped the records (kernel receive time or user space)
        "timing_error_ms": dist(err_ms),  # the records' stamps
        "user_stamp_error_ms": dist(user_err_ms),  # had the events been stamped when Python read them
        "client_lag_ms": dist((rx - cli) / 1e6),  # read time - receive stamp: the client's own delay
        "loop_lag_ms": out.loop_lag_ms,
        # CPU time per event (user+sys, incl. socket syscalls): unlike wall-clock rates this hardly
        # depends on machine load. Client: this whole process during the level; server: its own report.
        "client_cpu_us_per_event": cpu_per_event(cpu0, cpu1, cli.size),
        "server_cpu_us_per_event": cpu_per_event(srv0, srv1, srv1["events"] - srv0["events"]) if srv0 and srv1 else None,
        "records_match_observer": consistent,
        "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
    }


def cpu_per_event(a: dict[str, float], b: dict[str, float], events: int) -> dict[str, float] | None:
    if not events:
        return None
    user, sys_ = (b["user_s"] - a["user_s"]) * 1e6 / events, (b["sys_s"] - a["sys_s"]) * 1e6 / events
    return {"total": round(user + sys_, 2), "user": round(user, 2), "sys": round(sys_, 2)}


async def server_stats(base_url: str) -> dict[str, Any] | None:
    """The calibration server's CPU seconds and events sent (None for a server without /stats)."""
    host, _, port = base_url.removeprefix("http://").partition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:  # plain HTTP/1.1 by hand: an httpx client would build an SSL context (~0.1 s) per call
        writer.write(b"GET /stats HTTP/1.1\r\nhost: %b\r\n\r\n" % host.encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            return None
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        return json.loads(await reader.readexactly(length))
    finally:
        writer.close()
