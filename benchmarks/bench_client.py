"""Benchmark: one client process on one core vs the loopback calibration server.

Target: >= 2000 concurrent streams and >= 50,000 streamed tokens/s ingested with timing
error < 0.2 ms at p99. Uses the exact client path of ``compare run`` (HttpStreamBackend -> the
shared SSE reader -> executor) through ``compare calibrate``'s measurement. The client is pinned
to the first allowed CPU, the server to the others.

Prints ONE line per stream count with everything docs/benchmarks.md records (load before/after,
client and server CPU per event, tokens/s ingested vs offered, timing error p50/p99/max, loop
lag), then a summary line; ``--json OUT`` also writes the full results.

    .venv/bin/python benchmarks/bench_client.py [--streams 200,2000] [--loop auto|uvloop|asyncio] [--json OUT]

``--scenario``: the exact-timing load of docs/benchmarks.md (e.g. 512 streams x 3 requests x 96
tokens, TTFT 50 ms, ITL 10 ms) with TTFT error, ingest ratio and send lateness per line;
``--ceiling N`` adds the zero-delay ingestion ceiling; ``LLM_COMPARE_RX_PARSE=0`` for the Python parser.

    .venv/bin/python benchmarks/bench_client.py --scenario --streams 512 --ttft-ms 50 --itl-ms 10 --tokens 96 --ceiling 512
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare.cli.commands.calibrate import run_calibration  # noqa: E402
from compare.running.calibration import CalibrationServerProcess, CalibrationTiming  # noqa: E402


def _load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def _steal() -> dict[str, tuple[int, int]]:
    """Per CPU (cpuN): (steal, total) jiffies from /proc/stat. Steal = time the hypervisor ran
    something else while this vCPU wanted to run: the VM's own noise, outside anything we do."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f and f[0].startswith("cpu") and f[0] != "cpu":
            vals = [int(x) for x in f[1:9]]
            out[f[0]] = (vals[7], sum(vals))
    return out


def steal_pct(a: dict[str, tuple[int, int]], b: dict[str, tuple[int, int]]) -> str:
    parts = []
    for cpu in sorted(b):
        if cpu in a and b[cpu][1] > a[cpu][1]:
            parts.append(f"{cpu}:{100 * (b[cpu][0] - a[cpu][0]) / (b[cpu][1] - a[cpu][1]):.0f}%")
    return ",".join(parts) or "?"


def _line(r: dict, load_before: str, load_after: str) -> str:
    e, lag = r["timing_error_ms"], r["loop_lag_ms"]
    u = r.get("user_stamp_error_ms") or e  # had events been stamped when Python read them
    def cpu(c: dict | None) -> str:  # microseconds per event: total (user + sys)
        return f"{c['total']}({c['user']}u+{c['sys']}s)" if c else "?"

    return (f"streams={r['streams']} ok={r['ok']}/{r['requests']} loop={r.get('event_loop', '?')} "
            f"tok_s={r['steady_tokens_per_s']:,.0f} offered={r['offered_tokens_per_s']:,.0f} "
            f"client_cpu_us_ev={cpu(r.get('client_cpu_us_per_event'))} "
            f"server_cpu_us_ev={cpu(r.get('server_cpu_us_per_event'))} "
            f"clock={(r.get('event_clock') or {}).get('source', '?').split(':')[0]} "
            f"err_ms p50={e['p50']:.3f} p99={e['p99']:.3f} max={e['max']:.3f} min={e['min']:.3f} "
            f"user_err_ms p50={u['p50']:.3f} p99={u['p99']:.3f} max={u['max']:.3f} "
            f"lag_ms p99={lag.get('p99', 0):.1f} max={lag.get('max', 0):.1f} "
            f"load_before=[{load_before}] load_after=[{load_after}] steal=[{r.get('steal', '?')}] "
            f"reader={(r.get('event_clock') or {}).get('reader', '?').split(' (')[0].replace(' ', '-')} "
            f"{'TARGET-MET' if target_met(r) else 'target-not-met' if r['streams'] >= 2000 else 'below-target-size'}")


def target_met(r: dict) -> bool:
    """The target, absolute: >= 2000 concurrent streams, all ok, >= 50,000 tokens/s
    ingested, p99 timing error < 0.2 ms (not calibrate's "90 % of the offered rate")."""
    return (r["streams"] >= 2000 and r["ok"] == r["requests"] and r["steady_tokens_per_s"] >= 50_000
            and r["timing_error_ms"]["p99"] < 0.2)


def wake_floor(client_cpu: int | None, writer_cpu: int | None, n: int = 2000) -> dict[str, float]:
    """The machine's own floor for the timing error: how late a process sleeping in select()
    on one CPU sees a socket write made by another process (one every 1 ms), with no Python
    event loop or HTTP involved. On a VM an idle vCPU halts and is woken by the host: on the
    2-vCPU CPU box of docs/benchmarks.md this alone had p50 ~0.1 ms, p99 up to ~2.6 ms."""
    import selectors
    import socket
    import struct

    import numpy as np

    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:  # the writer
        try:
            if writer_cpu is not None:
                os.sched_setaffinity(0, {writer_cpu})
            a.close()
            for _ in range(n):
                time.sleep(0.001)
                b.send(struct.pack("q", time.perf_counter_ns()))
        finally:
            os._exit(0)
    b.close()
    before = os.sched_getaffinity(0)
    if client_cpu is not None:
        os.sched_setaffinity(0, {client_cpu})
    lat: list[float] = []
    try:
        sel = selectors.DefaultSelector()
        sel.register(a, selectors.EVENT_READ)
        while len(lat) < n:
            sel.select(5)
            t = time.perf_counter_ns()
            d = a.recv(8)
            if len(d) < 8:
                break
            lat.append((t - struct.unpack("q", d)[0]) / 1e3)
    finally:
        os.sched_setaffinity(0, before)
        a.close()
        os.waitpid(pid, 0)
    p50, p99 = np.percentile(lat, [50, 99]) if lat else (float("nan"),) * 2
    return {"p50_us": round(float(p50), 1), "p99_us": round(float(p99), 1), "max_us": round(max(lat, default=0.0), 1),
            "samples": len(lat)}


# ---------------------------------------------------------------- the exact-timing scenario
async def _scenario(url: str, streams: int, rounds: int, tokens: int, keep: list | None = None) -> dict:
    """``streams`` closed-loop streams, each sending ``rounds`` requests of ``tokens`` tokens, through
    the exact path of ``compare run`` (HttpStreamBackend -> run_level). Every event carries the
    server's send stamp (SSE id); observed per event on either path (C parser or Python)."""
    import gc

    import numpy as np

    from backends.http_backends import HttpStreamBackend
    from compare.running.calibration import cpu_times
    from compare.running.calibration.client import server_stats
    from compare.running.executor import run_level
    from compare.workload.schedule import LoadLevel
    from core.records import GenerationRequest

    srv_ids: list[int] = []
    cli_t: list[int] = []
    cli_rx: list[int] = []
    first: dict[str, tuple[int, int]] = {}  # rid -> (server send stamp, client stamp) of its first event

    def raw(rid, ev):  # the Python path: per event
        if ev.id is not None:
            s = int(ev.id)
            srv_ids.append(s)
            cli_t.append(ev.t_ns)
            cli_rx.append(ev.rx_ns if ev.rx_ns is not None else ev.t_ns)
            first.setdefault(rid, (s, ev.t_ns))

    def batch(rid, t, rx, sids):  # the C path: per request
        srv_ids.extend(sids)
        cli_t.extend(t)
        cli_rx.extend(rx)
        if t:
            first.setdefault(rid, (sids[0], t[0]))

    reqs = [GenerationRequest(f"s{i}", tokens, prompt_token_ids=(1, 2, 3)) for i in range(streams * rounds)]
    b = HttpStreamBackend(None, "bench", protocol="openai", base_url=url, metrics=None, max_connections=streams + 16)
    b.raw_observer, b.batch_observer = raw, batch
    async with b:
        srv0 = await server_stats(url)
        gc.collect()
        cpu0 = cpu_times()
        out = await run_level(b, reqs, LoadLevel("concurrency", streams), seed=0, timeout_s=120, max_errors=len(reqs))
        cpu1 = cpu_times()
        srv1 = await server_stats(url)
        clock = b.describe().extra.get("event_clock", {})
    recs = out.records
    if keep is not None:  # the records themselves (benchmarks/bench_product_path.py judges them)
        keep.extend(recs)
    ok = [r for r in recs if r.ok]
    srv, cli, rx = (np.asarray(x, dtype=np.int64) for x in (srv_ids, cli_t, cli_rx))
    rate = 0.0
    if rx.size > 10:  # steady state: the middle 60 % of the time events were read
        lo, hi = np.percentile(rx, [20, 80])
        rate = float(((rx >= lo) & (rx <= hi)).sum()) / ((hi - lo) / 1e9) if hi > lo else 0.0
    sent_rate = 0.0  # what the server actually sent, same window rule (by its send stamps)
    if srv.size > 10:
        lo, hi = np.percentile(srv, [20, 80])
        sent_rate = float(((srv >= lo) & (srv <= hi)).sum()) / ((hi - lo) / 1e9) if hi > lo else 0.0
    by_id = {r.request_id: r for r in ok}
    ttft_err = []  # recorded TTFT - true TTFT (server's first send - when the bytes left) = first stamp's error
    ttft_nominal = []
    for rid, (s, t) in first.items():
        r = by_id.get(rid)
        if r is not None and r.event_times_ns:
            ttft_err.append((r.event_times_ns[0] - r.t_sent_ns - (s - r.t_sent_ns)) / 1e6)
            ttft_nominal.append((r.event_times_ns[0] - r.t_sent_ns) / 1e6)
    late = [r.send_lateness_ns / 1e6 for r in recs if r.send_lateness_ns is not None]
    # a stream's first request waits for the level's start (connects, one write per loop iteration);
    # every later one for the end of the response before it (closed loop): reported apart
    from bench_client_procs import resent
    late_resent = [r.send_lateness_ns / 1e6 for r in resent(recs)]

    def dist(x) -> dict:
        x = np.asarray(x, dtype=float)
        if not x.size:
            return {}
        return {k: round(float(v), 3) for k, v in zip(("p50", "p99", "max"), (*np.percentile(x, [50, 99]), x.max()))}

    events = int(cli.size)
    return {"streams": streams, "requests": len(recs), "ok": len(ok), "events": events,
            "tokens": sum(len(r.token_ids) for r in ok), "wall_s": round((out.t_end_ns - out.t_start_ns) / 1e9, 2),
            "steady_events_per_s": rate, "server_sent_events_per_s": sent_rate,
            # read by the client within 1 ms of the server's write: it kept up with what was sent
            "read_within_1ms": round(float(((rx - srv) < 1_000_000).mean()), 4) if rx.size else None,
            "event_error_ms": dist((cli - srv) / 1e6), "ttft_error_ms": dist(ttft_err),
            "ttft_ms": dist(ttft_nominal), "send_lateness_ms": dist(late),
            "send_lateness_resent_ms": dist(late_resent), "loop_lag_ms": out.loop_lag_ms,
            "client_cpu_us_per_event": _per_event(cpu0, cpu1, events),
            "server_cpu_us_per_event": _per_event(srv0, srv1, srv1["events"] - srv0["events"]) if srv0 and srv1 else None,
            "parser": "python" if os.environ.get("LLM_COMPARE_RX_PARSE", "1") == "0" else "C (receive thread)",
            "event_clock": clock}


def _per_event(a: dict, b: dict, n: int) -> dict | None:
    from compare.running.calibration.client import cpu_per_event as pe
    return pe(a, b, n)


def scenario(a: argparse.Namespace) -> None:
    """``--scenario``: the exact-timing load (TTFT, ITL, tokens, rounds per stream), client on the
    first allowed CPU, server (``_Server``) on the others; one line per stream count; ``--ceiling``
    also runs the zero-delay ingestion ceiling (the server sends each whole response at once)."""
    from compare.running import aio
    from compare.running.calibration import raise_nofile

    raise_nofile()
    cpus = sorted(os.sched_getaffinity(0))
    client, server = {cpus[0]}, ",".join(str(c) for c in cpus[1:]) or str(cpus[0])
    results = []
    runs = [(a.ttft_ms, a.itl_ms, n) for n in (int(s) for s in a.streams.split(","))]
    if a.ceiling:
        runs.append((0.0, 0.0, a.ceiling))
    for ttft, itl, n in runs:
        before = os.sched_getaffinity(0)
        with _Server(CalibrationTiming(ttft, itl, a.tokens_per_event), server, procs=a.server_procs) as url:
            os.sched_setaffinity(0, client)
            try:
                load0 = _load()
                r = aio.run(_scenario(url, n, a.rounds, a.tokens))
            finally:
                os.sched_setaffinity(0, before)
        # offered: one token per ITL per stream (nominal); attainable: what a client that is never
        # late can get in a closed loop, each request also waiting TTFT for its first token
        events = -(-a.tokens // a.tokens_per_event)
        r |= {"ttft_target_ms": ttft, "itl_ms": itl, "tokens_per_event": a.tokens_per_event, "rounds": a.rounds,
              "offered_tokens_per_s": n * a.tokens_per_event * 1000 / itl if itl else None,
              "attainable_tokens_per_s": n * a.tokens * 1000 / (ttft + (events - 1) * itl) if itl else None,
              "server_procs": a.server_procs, "load_before": load0, "load_after": _load()}
        tok_s = r["steady_events_per_s"] * a.tokens_per_event
        ing = (f"{100 * tok_s / r['attainable_tokens_per_s']:.1f}%_of_attainable_{r['attainable_tokens_per_s']:,.0f}"
               f"({100 * tok_s / r['offered_tokens_per_s']:.1f}%_of_nominal)") if r["offered_tokens_per_s"] else "ceiling"
        print(f"streams={n} ttft={ttft:g}ms itl={itl:g}ms parser={r['parser']} ok={r['ok']}/{r['requests']} "
              f"tok_s={tok_s:,.0f} ingested={ing} server_sent_tok_s={r['server_sent_events_per_s'] * a.tokens_per_event:,.0f} "
              f"thread_sent={(r['event_clock'] or {}).get('thread_sent')} server_procs={a.server_procs} "
              f"read_within_1ms={r['read_within_1ms']} ttft_err_ms={r['ttft_error_ms']} event_err_ms={r['event_error_ms']} "
              f"ttft_ms={r['ttft_ms']} send_late_ms={r['send_lateness_ms']} resent={r['send_lateness_resent_ms']} lag_ms={r['loop_lag_ms']} "
              f"client_cpu_us_ev={r['client_cpu_us_per_event']} load=[{r['load_before']}]->[{r['load_after']}]",
              flush=True)
        results.append(r)
    if a.json:
        Path(a.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M %Z"), "results": results},
                                           indent=1, default=str) + "\n")


# ---------------------------------------------------------------- the zero-delay server
def _serve_whole(argv: list[str]) -> None:
    """The calibration server, but at zero delay each response leaves in one write: a write per
    event made the one-core Python server, not the client under test, the ceiling's bottleneck."""
    from compare.running.calibration import server as cal

    per_event = cal._Conn.emit

    def emit(self) -> None:
        tr = self.tr
        if self.itl_s or self.tgi or tr is None:
            return per_event(self)
        sent, n, parts = self.sent, self.n, []
        while sent < n:  # every remaining event, each stamped as it is formatted
            k = min(self.per_event, n - sent)
            last = sent + k >= n
            tmpl = cal._chunk(k, sent, cal._USAGE % (n, n + 1)) if last else cal._ONE_TOKEN[sent % 1000] \
                if k == 1 else cal._chunk(k, sent, None)
            parts.append(tmpl % time.perf_counter_ns())
            sent += k
        self.ticker.events += len(parts)
        self.sent = n
        tr.write(b"".join(parts))
        self.busy = False
        self._next()

    cal._Conn.emit = emit
    cal.main(argv)


class _Server(CalibrationServerProcess):
    """``with _Server(timing, cpus) as url``: _serve_whole in a subprocess, always stopped."""

    def command(self) -> list[str]:
        return [sys.executable, __file__, "--serve-whole", *super().command()[3:]]


def main() -> None:
    if sys.argv[1:2] == ["--serve-whole"]:  # the scenario's server process (_Server)
        return _serve_whole(sys.argv[2:])
    p = argparse.ArgumentParser()
    p.add_argument("--streams", default="200,2000")
    p.add_argument("--tokens", type=int, default=50)
    # 2000 streams x 1/38 ms = 52.6k events/s offered: >= 50k ingested must be shown, not rounded
    # to (at 40 ms the offer is exactly 50k and the ingest measures 49.6-50.0k)
    p.add_argument("--itl-ms", type=float, default=38.0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--tokens-per-event", type=int, default=1)
    p.add_argument("--max-error-ms", type=float, default=0.2)
    p.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default=None,
                   help="client event loop (default: LLM_COMPARE_LOOP or auto = uvloop when installed)")
    p.add_argument("--json", metavar="OUT", help="also write the full results as JSON to OUT")
    p.add_argument("--scenario", action="store_true",
                   help="the exact-timing load instead of the calibration sweep: --streams, --ttft-ms, --itl-ms, "
                        "--tokens, --rounds requests per stream; reports TTFT error, ingest %%, send lateness")
    p.add_argument("--rounds", type=int, default=3, help="--scenario: requests per stream, one after another")
    p.add_argument("--server-procs", type=int, default=1,
                   help="--scenario: loopback server processes sharing its port (compare/running/calibration/shards.py)")
    p.add_argument("--ceiling", type=int, default=0, metavar="STREAMS",
                   help="--scenario: also measure the zero-delay ingestion ceiling with this many streams")
    a = p.parse_args()
    if a.loop:
        os.environ["LLM_COMPARE_LOOP"] = a.loop
    if os.environ.get("LLM_COMPARE_LOOP", "auto") != "asyncio":
        try:  # for an asyncio.run() caller; compare.running.aio.run reads LLM_COMPARE_LOOP itself
            import asyncio

            import uvloop
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    if a.scenario:
        return scenario(a)
    cpus = sorted(os.sched_getaffinity(0))
    floor = wake_floor(cpus[0], cpus[1] if len(cpus) > 1 else None)
    print(f"# machine floor (no event loop, no HTTP): a sleeping reader on CPU {cpus[0]} sees a socket write from "
          f"another process p50 {floor['p50_us']} us, p99 {floor['p99_us']} us, max {floor['max_us']} us "
          f"({floor['samples']} writes, 1 per ms)", flush=True)
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    t0 = time.time()
    last = [_load(), _steal()]

    def show(r: dict) -> None:
        now, st = _load(), _steal()
        r["steal"] = steal_pct(last[1], st)  # over this stream count's whole run (server start excluded)
        print(_line(r, last[0], now), flush=True)
        last[0], last[1] = now, st

    res = run_calibration([int(s) for s in a.streams.split(",")], a.tokens, a.ttft_ms, a.itl_ms,
                          a.tokens_per_event, a.max_error_ms, on_result=show)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    res["machine"] = {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(), "wake_floor": floor,
                      "uptime_before": uptime_before,
                      "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    res["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
    res["bench_s"] = round(time.time() - t0, 1)
    print(f"# {res['date']} {cpu} x{os.cpu_count()}, client CPU {res['client_cpus']}, server CPU "
          f"{res['server_cpus']}; uptime before: {uptime_before}; after: {res['machine']['uptime_after']}; "
          f"{res['bench_s']} s; max sustainable streams: {res['max_sustainable_streams']}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
