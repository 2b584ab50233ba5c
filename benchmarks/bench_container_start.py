"""Container start-to-ready: our manager (containers/manager.py) vs `docker run` + curl polling by hand.

Target: the manager costs at most 10% more than doing it by hand. Both sides poll the server's
health route every 0.1 s and stop the clock at the first HTTP 200; teardown is not timed. The
manager side includes everything it does on a start: daemon ping, local-image check, create with
labels/mounts/shm, start, watchdog spawn, container-state checks while waiting.

Rounds alternate (manager, by hand, manager, ...) so machine load drifts onto both alike.
Targets:
  light  llm-compare/base: python3 -m http.server (isolates the container-layer overhead)
  vllm   llm-compare/vllm-cpu: the real vLLM OpenAI server on the tiny model (eager), /health

Usage: .venv/bin/python benchmarks/bench_container_start.py [--target light|vllm] [--rounds N] [--json OUT]
Record results in docs/benchmarks.md with the machine, date and `uptime` load.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from containers.manager import ContainerSpec, ManagedContainer, free_port  # noqa: E402

POLL_S = 0.1


def target_spec(name: str) -> tuple[ContainerSpec, str]:
    if name == "light":
        return ContainerSpec(image="llm-compare/base:bookworm", command=("python3", "-m", "http.server", "80"),
                             container_port=80), "/"
    from backends.models.tiny import ensure_tiny_model

    model = ensure_tiny_model()
    return ContainerSpec(
        image="llm-compare/vllm-cpu:0.32.0", container_port=8000, mounts=((str(model), "/models/m"),),
        command=("--model", "/models/m", "--host", "0.0.0.0", "--port", "8000", "--dtype", "float32",
                 "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 * 2**20), "--enforce-eager"),
    ), "/health"


async def by_manager(spec: ContainerSpec, path: str) -> float:
    t0 = time.perf_counter()
    c = ManagedContainer(spec, backend="bench-start")
    try:
        c.preflight()
        await asyncio.to_thread(c.start)
        async with httpx.AsyncClient(timeout=2.0) as client:
            async def probe(base: str) -> bool:
                try:
                    return (await client.get(base + path)).status_code == 200
                except httpx.HTTPError:
                    return False

            await c.wait_ready(probe, timeout_s=1800, poll_s=POLL_S)
        return time.perf_counter() - t0
    finally:
        c.stop(timeout=5)


def by_hand(spec: ContainerSpec, path: str) -> float:
    port = free_port()
    name = f"bench-hand-{os.getpid()}-{port}"
    argv = spec.docker_run_argv(host_port=port, name=name)
    script = (f"{shlex.join(argv)} >/dev/null && "
              f"until curl -sf -o /dev/null http://127.0.0.1:{port}{path}; do sleep {POLL_S}; done")
    t0 = time.perf_counter()
    try:
        subprocess.run(["bash", "-c", script], check=True, timeout=1800)
        return time.perf_counter() - t0
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=["light", "vllm"], default="light")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--json", type=Path, help="write the raw timings here")
    args = ap.parse_args()
    spec, path = target_spec(args.target)
    # one untimed start of each first: page cache, image layers, Python imports
    asyncio.run(by_manager(spec, path))
    by_hand(spec, path)
    mgr, hand = [], []
    for i in range(args.rounds):
        first, second = (by_manager, by_hand) if i % 2 == 0 else (by_hand, by_manager)
        for fn in (first, second):
            t = asyncio.run(fn(spec, path)) if fn is by_manager else fn(spec, path)
            (mgr if fn is by_manager else hand).append(t)
            print(f"round {i + 1}: {'manager' if fn is by_manager else 'by hand'} {t:.3f} s", flush=True)
    m, h = statistics.median(mgr), statistics.median(hand)
    ratio = m / h
    load = os.getloadavg()
    out = {"target": args.target, "rounds": args.rounds, "manager_s": mgr, "by_hand_s": hand,
           "median_manager_s": m, "median_by_hand_s": h, "ratio": ratio, "within_10pct": ratio <= 1.10,
           "loadavg": load, "host": socket.gethostname(), "date": time.strftime("%Y-%m-%d %H:%M"),
           "cpus": os.cpu_count()}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print(f"| {args.target} | {args.rounds} | {m:.3f} | {h:.3f} | {ratio:.3f} | "
          f"{'yes' if ratio <= 1.10 else 'NO'} | {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} |")
    return 0 if ratio <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
