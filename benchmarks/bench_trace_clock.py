"""Trace-clock adherence: how late `compare run --trace` sends against the trace's own offsets.

Writes a Mooncake-format trace of N requests at a constant R req/s (default 1,000 at 50 req/s,
20 s), replays it on the fake engine (a deterministic test instrument: the client, not an engine,
is measured) and prints the level's send lateness (send_delay_ms p50/p99/max) from run.json.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_trace_clock.py [--requests 1000] [--rate 50]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=50.0)
    args = ap.parse_args()
    from backends.models.tiny import ensure_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        gap_ms = 1000.0 / args.rate
        trace.write_text("".join(json.dumps({"timestamp": round(i * gap_ms, 3), "input_length": 32,
                                             "output_length": 4, "hash_ids": [i % 8]}) + "\n"
                                 for i in range(args.requests)), encoding="utf-8")
        out = Path(tmp) / "out"
        cmd = [str(ROOT / ".venv/bin/compare"), "run", "--backends", "fake", "--model", str(ensure_tiny_model()),
               "--native", "fake.ttft=5ms", "--native", "fake.itl=2ms", "--trace", str(trace),
               "--warmup", "0", "--out", str(out), "--run-id", "b", "--quiet"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        level = json.loads((out / "b" / "run.json").read_text())["backends"]["fake"]["levels"]["trace"]
        d = level["send_delay_ms"]
        print(json.dumps({"requests": level["ok"], "rate": args.rate, "send_lateness_ms":
                          {k: round(d[k], 3) for k in ("p50", "p99", "max")},
                          "loop_lag_ms": level.get("loop_lag_ms")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
