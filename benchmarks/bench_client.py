"""Benchmark: one client process on one core vs the loopback calibration server.

Target (issue 3): >= 2000 concurrent streams and >= 50,000 streamed tokens/s ingested with timing
error < 0.2 ms at p99. Uses the exact client path of ``compare run`` (HttpStreamBackend -> the
shared SSE reader -> executor) through ``compare calibrate``'s measurement. The client is pinned
to the first allowed CPU, the server to the others. Prints one JSON document (record it in
docs/benchmarks.md with the machine load printed here).

    .venv/bin/python benchmarks/bench_client.py [--streams 500,1000,2000] [--tokens-per-event 1]
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

from compare.commands.calibrate import run_calibration  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--streams", default="500,1000,2000")
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--itl-ms", type=float, default=40.0)  # 2000 streams x 25 events/s = 50k events/s
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--tokens-per-event", type=int, default=1)
    p.add_argument("--max-error-ms", type=float, default=0.2)
    a = p.parse_args()
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    t0 = time.time()
    res = run_calibration([int(s) for s in a.streams.split(",")], a.tokens, a.ttft_ms, a.itl_ms,
                          a.tokens_per_event, a.max_error_ms,
                          on_result=lambda r: print(f"# {r['streams']} streams: {r['steady_tokens_per_s']:,.0f} tok/s, "
                                                    f"err p99 {r['timing_error_ms']['p99']:.3f} ms", file=sys.stderr))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    res["machine"] = {"cpu": cpu, "cpus": os.cpu_count(), "python": platform.python_version(),
                      "uptime_before": uptime_before,
                      "uptime_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}
    res["date"] = time.strftime("%Y-%m-%d %H:%M %Z")
    res["bench_s"] = round(time.time() - t0, 1)
    for lv in res["levels"]:
        lv.pop("errors", None) if not lv.get("errors") else None
    print(json.dumps(res, indent=1, default=str))


if __name__ == "__main__":
    main()
