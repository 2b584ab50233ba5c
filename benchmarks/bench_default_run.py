"""Benchmark: the embedded default `compare run` (tiny model, vllm vs hf, CPU).

Targets: finishes in under 3 minutes on 2 CPU cores after install; peak RSS under 4 GB
(the whole process tree: the CLI plus vLLM's EngineCore process).

    .venv/bin/python benchmarks/bench_default_run.py [--repeats 2]

Prints one JSON line per repeat and a summary; record the result in docs/benchmarks.md with the
machine, the date and `uptime` (other load on the machine changes wall time).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def tree_rss(pid: int) -> int:
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def one() -> dict:
    out = tempfile.mkdtemp(prefix="bench-default-")
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "compare"), "run", "--out", out],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, tree_rss(proc.pid))
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    run = json.loads(next(Path(out).glob("*/run.json")).read_text())
    return {"rc": proc.returncode, "wall_s": round(wall, 1), "peak_tree_rss_gb": round(peak / 1e9, 2),
            "status": run["status"], "load_avg_1m": os.getloadavg()[0],
            "vllm_start_s": run["backends"]["vllm"].get("start_s")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    rows = [one() for _ in range(a.repeats)]
    for r in rows:
        print(json.dumps(r))
    print(json.dumps({"max_wall_s": max(r["wall_s"] for r in rows),
                      "max_peak_tree_rss_gb": max(r["peak_tree_rss_gb"] for r in rows),
                      "target": "wall < 180 s, RSS < 4 GB",
                      "cpu": psutil.cpu_count(), "date": time.strftime("%Y-%m-%d")}))


if __name__ == "__main__":
    main()
