"""Benchmark: ``compare run`` (the product path) against ``bench_client.py --scenario`` (the bare
load generator), the same exact-timing scenario, back to back, against one loopback server.

Both paths send through the same client code (HttpStreamBackend -> run_level); ``compare run``
adds around each level what a user gets: the live status line (a pseudo-terminal here, as on a
user's console), CPU/GPU telemetry sampling, server-metrics scraping (the calibration server
serves a /metrics page of a vLLM page's size), and each record's path to requests.jsonl. Each
extra can be switched off alone (``--modes run-no-telemetry,...``), so its cost is the
difference between two interleaved modes. The client runs on the first allowed CPU, the server
on the others, as in bench_client.py.

Every mode is judged by the same numbers, from its request records: the ingest ratio (tokens/s
read in the middle 60 % of the level's arrival stamps / the attainable closed-loop rate), TTFT
p50/p99 above the server's exact TTFT, the closed loop's resend lateness p99, and the client's
loop lag. ``--rounds-of-modes`` repeats the whole list (interleaved), so noise shows as a range.

    .venv/bin/python benchmarks/bench_product_path.py --streams 512 --rounds 3 --tokens 96 \\
        --ttft-ms 50 --itl-ms 10 --repeat 3 [--modes bench,run,run-bare,...] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# what `compare run` adds to a level, each of which a mode can switch off (``run-no-X``)
EXTRAS = ("status", "telemetry", "metrics", "records")
MODES = ("bench", "run", *(f"run-no-{x}" for x in EXTRAS), "run-bare")


# ---------------------------------------------------------------- the child: compare run, some extras off
def _child_run(off: list[str], argv: list[str]) -> None:
    """``compare run`` in this process with the named extras replaced by no-ops (measuring only)."""
    if "telemetry" in off:
        import compare.running.runner as runner

        class _NoTelemetry:
            def __init__(self, *a, **k) -> None: ...
            def __enter__(self): return self
            def __exit__(self, *exc) -> None: ...
            def summary(self, *a, **k) -> None: return None

        runner.LevelTelemetry = _NoTelemetry
    if "metrics" in off:
        from backends.server_metrics import MetricsScraper

        async def start(self, label: str) -> None:  # as if the server had no /metrics
            self.available = False
        MetricsScraper.start = start
    if "records" in off:
        from core.results.io import ResultsWriter

        write, finish, held = ResultsWriter.add_records, ResultsWriter.finish, []
        ResultsWriter.add_records = lambda self, recs: held.extend(recs)  # kept, written once the run ends

        def finish_after_records(self, *a, **k) -> None:
            write(self, held)
            held.clear()
            finish(self, *a, **k)
        ResultsWriter.finish = finish_after_records
    if "status" in off:
        from compare.report.console import ConsoleProgress

        ConsoleProgress.backend_start = lambda self, name: setattr(self, "_name", name)
    _count_level_cpu()
    from compare.cli.main import main

    sys.argv = ["compare", *argv]
    sys.exit(main())


def _count_level_cpu() -> None:
    """The process's CPU seconds (every thread) over the level itself, written to
    $BENCH_LEVEL_CPU: inside run_level's garbage-collector freeze, which collects a heap of a
    different size on each path and is not part of the level."""
    import compare.running.executor as executor
    from compare.running.calibration import cpu_times

    level = executor._run_level

    async def level_cpu(*a, **k):
        c0 = cpu_times()
        try:
            return await level(*a, **k)
        finally:
            c1 = cpu_times()
            Path(os.environ["BENCH_LEVEL_CPU"]).write_text(str(c1["user_s"] + c1["sys_s"] - c0["user_s"] - c0["sys_s"]))
    executor._run_level = level_cpu


def _child_bench(url: str, streams: int, rounds: int, tokens: int, out: str) -> None:
    """bench_client.py --scenario's measurement (its ``_scenario``), records written to ``out``."""
    from bench_client import _scenario
    from compare.running import aio

    keep: list = []
    _count_level_cpu()
    r = aio.run(_scenario(url, streams, rounds, tokens, keep=keep))
    with open(out, "w") as f:
        f.write(json.dumps({"loop_lag_ms": r["loop_lag_ms"], "ttft_error_ms": r["ttft_error_ms"]}) + "\n")
        for rec in keep:
            f.write(json.dumps(rec.to_json()) + "\n")


# ---------------------------------------------------------------- each extra's cost per unit
def unit_costs(tokens: int, streams: int) -> None:
    """What each extra costs per unit of its work (microseconds of the process's time, best of 5
    runs of many calls, so the least disturbed by other work on the machine), and per second of
    a level of this scenario; the old record serialisation (dataclasses.asdict) beside the new."""
    import dataclasses
    import timeit

    from backends.server_metrics import parse_gauges, parse_prometheus
    from backends.telemetry import LevelTelemetry
    from compare.running.calibration import metrics_page
    from core.records import RequestRecord
    from core.results.io import record_line

    t = time.perf_counter_ns()
    rec = RequestRecord(request_id="r1", backend="openai@http://127.0.0.1:8000", level=f"c{streams}", t_sent_ns=t,
                        t_ready_ns=t, event_times_ns=tuple(t + i * 10_000_000 for i in range(tokens)),
                        event_token_counts=(1,) * tokens, token_ids=tuple(range(1000, 1000 + tokens)), t_end_ns=t,
                        finish_reason="length", prompt_tokens=3, usage_completion_tokens=tokens,
                        requested_tokens=tokens)

    def old_line() -> bytes:
        d = dataclasses.asdict(rec)
        for k in ("event_times_ns", "event_token_counts", "token_ids"):
            d[k] = list(d[k])
        return (json.dumps(d) + "\n").encode()
    page = metrics_page().decode()
    tel = LevelTelemetry()
    tel.cpu.sample()

    def us(fn, n: int) -> float:
        return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    per_s = streams / ((50 + (tokens - 1) * 10) / 1e3)  # records a second in this scenario (TTFT 50, ITL 10 ms)
    rows = [("record -> requests.jsonl, before (asdict + json)", us(old_line, 200), per_s),
            ("record -> requests.jsonl (msgspec, the dataclass directly)", us(lambda: record_line(rec), 2000), per_s),
            ("gauge sample, before (full Prometheus parse, 90 KB page)", us(lambda: parse_prometheus(page), 5), 2.0),
            ("gauge sample (gauge lines only)", us(lambda: parse_gauges(page), 200), 2.0),
            ("telemetry tick (thread; this process's tree)", us(tel.cpu.sample, 50), 4.0)]
    try:
        from rich.console import Console

        from compare.report.console import ConsoleProgress, _Status
        con = Console(file=open(os.devnull, "w"), force_terminal=True, width=120)
        prog = ConsoleProgress(con)
        prog._name, prog._what, prog._total = "openai", f"c{streams}", streams * 3  # mid-level
        rows.append(("status line refresh (thread)", us(lambda: con.print(_Status(prog)), 200), 8.0))
    except ImportError:
        pass
    print(f"# cost per unit (best of 5) and per second of a level of {streams} streams x {tokens} tokens")
    for what, u, rate in rows:
        print(f"{what:60s} {u:10.1f} us x {rate:7.1f}/s = {u * rate / 1e4:6.2f} % of a core")


# ---------------------------------------------------------------- numbers from records
def judge(records: list[dict], streams: int, tokens: int, ttft_ms: float, itl_ms: float) -> dict:
    import numpy as np

    ok = [r for r in records if not r.get("error_kind")]
    t = np.sort(np.concatenate([np.repeat(np.asarray(r["event_times_ns"], dtype=np.int64),
                                          np.asarray(r["event_token_counts"], dtype=np.int64))
                                for r in ok if r.get("event_times_ns")]))
    lo, hi = t[len(t) // 5], t[len(t) * 4 // 5]
    rate = (len(t) * 3 // 5) / ((hi - lo) / 1e9) if hi > lo else 0.0
    attainable = streams * tokens * 1000 / (ttft_ms + (tokens - 1) * itl_ms)
    ttft = np.asarray([(r["event_times_ns"][0] - r["t_sent_ns"]) / 1e6 - ttft_ms
                       for r in ok if r.get("event_times_ns")])
    ends = {r["event_times_ns"][-1] if r.get("event_times_ns") else r["t_end_ns"] for r in records}
    late = np.asarray([(r["t_sent_ns"] - r["t_ready_ns"]) / 1e6 for r in records
                       if r.get("t_ready_ns") in ends and r.get("t_sent_ns")])
    q = lambda x, p: round(float(np.percentile(x, p)), 2) if x.size else None  # noqa: E731
    return {"ok": len(ok), "requests": len(records), "tok_s": round(rate),
            "ingest_pct": round(100 * rate / attainable, 2),
            "ttft_excess_ms_p50": q(ttft, 50), "ttft_excess_ms_p99": q(ttft, 99),
            "resend_late_ms_p99": q(late, 99)}


# ---------------------------------------------------------------- one measurement
def _pinned(cpu: int):
    return lambda: os.sched_setaffinity(0, {cpu})


def _in_pty(cmd: list[str], env: dict, cpu: int, timeout: float) -> int:
    """Run ``cmd`` with a pseudo-terminal as stdout/stderr (the live status line is on, as on a
    user's console), the output drained and dropped."""
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env, cwd=ROOT,
                         preexec_fn=_pinned(cpu), start_new_session=True)
    os.close(slave)

    def drain() -> None:
        try:
            while os.read(master, 65536):
                pass
        except OSError:
            pass
    th = threading.Thread(target=drain, daemon=True)
    th.start()
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        return p.wait()
    finally:
        th.join(timeout=2)
        os.close(master)


def measure(mode: str, url: str, a: argparse.Namespace, client: int, tmp: Path) -> dict:
    # the repo first, then whatever the caller's path holds (a machine whose packages live in an
    # extra site directory)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "120"}
    t0 = time.time()
    cpu_file = tmp / f"{mode}-{t0:.0f}.cpu"
    env["BENCH_LEVEL_CPU"] = str(cpu_file)
    if mode == "bench":
        out = tmp / f"bench-{t0:.0f}.jsonl"
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child-bench", url, str(a.streams),
                        str(a.rounds), str(a.tokens), str(out)],
                       env=env, cwd=ROOT, check=True, preexec_fn=_pinned(client))
        lines = out.read_text().splitlines()
        head, records = json.loads(lines[0]), [json.loads(x) for x in lines[1:]]
        lag, cpu = head["loop_lag_ms"], float(cpu_file.read_text())
    else:
        off = list(EXTRAS) if mode == "run-bare" else [mode[len("run-no-"):]] if mode.startswith("run-no-") else []
        run_id = f"{mode}-{t0:.0f}"
        argv = ["run", "--backends", f"openai@{url}", "--concurrency", str(a.streams),
                "--num-requests", str(a.streams * a.rounds), "--input-len", "3", "--output-len", str(a.tokens),
                "--warmup", "1", "--out", str(tmp), "--run-id", run_id]
        rc = _in_pty([sys.executable, str(Path(__file__).resolve()), "--child-run", ",".join(off), "--", *argv],
                     env, client, 600)
        d = tmp / run_id
        if rc not in (0, 1) or not (d / "run.json").exists():
            raise RuntimeError(f"{mode}: compare run exited {rc}")
        records = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines() if x.strip()]
        run = json.loads((d / "run.json").read_text())
        (level,) = next(iter(run["backends"].values()))["levels"].values()
        lag, cpu = level.get("loop_lag_ms") or {}, float(cpu_file.read_text())
    tokens = sum(len(r["token_ids"]) for r in records)
    r = {"mode": mode, **judge(records, a.streams, a.tokens, a.ttft_ms, a.itl_ms),
         "lag_ms_p99": lag.get("p99"), "lag_ms_max": lag.get("max"),
         # the cost on the client's core, far less at the mercy of other work than the timings
         "level_cpu_s": round(cpu, 3), "cpu_us_per_token": round(cpu / max(tokens, 1) * 1e6, 2),
         "load": "%.2f" % os.getloadavg()[0]}
    return r


def main() -> None:
    if sys.argv[1:2] == ["--child-run"]:
        off = [x for x in sys.argv[2].split(",") if x]
        return _child_run(off, sys.argv[4:])
    if sys.argv[1:2] == ["--child-bench"]:
        url, streams, rounds, tokens, out = sys.argv[2:7]
        return _child_bench(url, int(streams), int(rounds), int(tokens), out)
    p = argparse.ArgumentParser()
    p.add_argument("--streams", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--modes", default="bench,run", help=f"comma-separated, interleaved: {', '.join(MODES)}")
    p.add_argument("--repeat", type=int, default=3, help="times the whole list of modes runs, interleaved")
    p.add_argument("--json", metavar="OUT")
    p.add_argument("--unit-costs", action="store_true", help="only each extra's cost per unit of its work")
    a = p.parse_args()
    if a.unit_costs:
        return unit_costs(a.tokens, a.streams)
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad:
        p.error(f"unknown mode(s) {', '.join(bad)}: use {', '.join(MODES)}")
    from compare.running.calibration import CalibrationTiming, raise_nofile
    from bench_client import _Server

    raise_nofile()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the server is stopped on the way out
    cpus = sorted(os.sched_getaffinity(0))
    client, server = cpus[0], ",".join(str(c) for c in cpus[1:]) or str(cpus[0])
    results: list[dict] = []
    print(f"# {time.strftime('%Y-%m-%d %H:%M %Z')} {os.cpu_count()} CPUs, client CPU {client}, server CPU(s) {server}; "
          f"{a.streams} streams x {a.rounds} requests x {a.tokens} tokens, TTFT {a.ttft_ms:g} ms, ITL {a.itl_ms:g} ms",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-product-") as tmp, \
            _Server(CalibrationTiming(a.ttft_ms, a.itl_ms, 1), server) as url:
        for k in range(a.repeat):
            for mode in modes:
                r = measure(mode, url, a, client, Path(tmp))
                r["round"] = k + 1
                results.append(r)
                print(" ".join(f"{key}={v}" for key, v in r.items()), flush=True)
    print("# summary (min..max over rounds)")
    for mode in modes:
        rs = [r for r in results if r["mode"] == mode]

        def span(key: str) -> str:
            v = [r[key] for r in rs if r.get(key) is not None]
            return f"{min(v):g}..{max(v):g}" if v else "-"
        print(f"{mode:18s} ingest% {span('ingest_pct'):>13s}  ttft_excess p50 {span('ttft_excess_ms_p50'):>11s} ms "
              f"p99 {span('ttft_excess_ms_p99'):>11s} ms  resend_late p99 {span('resend_late_ms_p99'):>11s} ms  "
              f"lag p99 {span('lag_ms_p99'):>10s} max {span('lag_ms_max'):>10s} ms  "
              f"client CPU/token {span('cpu_us_per_token'):>11s} us", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M %Z"), "args": vars(a),
                                            "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
