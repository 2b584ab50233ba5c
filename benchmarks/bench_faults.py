"""The fault list, against real engines: what `compare run` leaves after each fault.

For each fault: the exit code, processes and containers of the run still alive afterwards (its
process tree, anything carrying its LLM_COMPARE_OWNER tag, containers labelled with its pid),
the records kept (ok / cancelled / failed), run.json's status, and how long the stop took.

    .venv/bin/python benchmarks/bench_faults.py            # everything (engine starts: ~10 min on 2 cores)
    .venv/bin/python benchmarks/bench_faults.py --only sigterm-vllm,malformed-stream

Faults: SIGINT / SIGTERM / SIGHUP / SIGKILL of the tool mid-level with the in-process vLLM
engine; SIGTERM with vllm-server and with vllm-container (when its image is built); the vLLM
server killed mid-run; a server that sends headers and then nothing (--timeout 3); a malformed
stream; a results disk that fills (a 200 KiB tmpfs, needs root); two starts with one run id.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from containers.watchdog import tagged  # noqa: E402
from tests.http_util import (  # noqa: E402
    ThreadedServer, openai_routes, openai_stream, silent_response, sse_response,
)

COMPARE = str(ROOT / ".venv" / "bin" / "compare")
SPEC = ("--dtype", "float32", "--max-model-len", "512", "--kv-cache-memory-bytes", str(64 << 20),
        "--enforce-eager", "true")
LOAD = ("--num-requests", "40", "--output-len", "200", "--concurrency", "2", "--warmup", "1")


@dataclass
class Row:
    fault: str
    exit_code: int | str
    leftovers: str
    records: str
    status: str
    stop_s: str
    note: str = ""


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().split("\n")[:-1] if x.strip()]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _containers(owner_pid: int) -> list[str]:
    r = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=llm-compare.owner-pid={owner_pid}"],
                       capture_output=True, text=True)
    return r.stdout.split() if r.returncode == 0 else []


def _records(d: Path) -> str:
    recs = _lines(d / "requests.jsonl")
    ok = sum(1 for x in recs if x.get("error_kind") is None)
    cancelled = sum(1 for x in recs if x.get("error_kind") == "cancelled")
    other = sorted({x["error_kind"] for x in recs if x.get("error_kind") not in (None, "cancelled")})
    return f"{ok} ok, {cancelled} cancelled, {len(recs) - ok - cancelled} failed" + (f" ({', '.join(other)})" if other else "")


def _status(d: Path) -> str:
    try:
        return json.loads((d / "run.json").read_text())["status"]
    except (OSError, ValueError, KeyError):
        return "-"


def _run_with_fault(name: str, out: Path, backend_args: list[str], fault: Callable[[psutil.Process], str],
                    min_records: int = 2, env: dict[str, str] | None = None) -> Row:
    """Start `compare run`, wait for ``min_records`` finished requests, apply ``fault``."""
    d = out / name
    argv = [COMPARE, "run", *backend_args, "--out", str(out), "--run-id", name]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env or _env())
    me = psutil.Process(proc.pid)
    tag = f"{me.pid}:{me.create_time():.2f}"
    deadline = time.time() + 900
    note = ""
    tree: list[psutil.Process] = []
    try:
        while len(_lines(d / "requests.jsonl")) < min_records and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if proc.poll() is not None:
            return Row(name, proc.returncode, "-", _records(d), _status(d), "-",
                       "ended before the fault: " + proc.stderr.read().strip().splitlines()[-1][:120])
        tree = me.children(recursive=True)
        t0 = time.time()
        note = fault(me)
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            return Row(name, "hung", "-", _records(d), _status(d), ">600")
        stop_s = time.time() - t0
        last = [ln for ln in err.splitlines() if ln.startswith(("interrupted", "error"))]
        note = note or (last[-1][:110] if last else "")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(8)  # the reaper's grace after a SIGKILL
    left = [p.pid for p in tree if _alive(p)] + [p.pid for p, _ in tagged(tag)]
    containers = _containers(proc.pid)
    leftovers = f"{len(set(left))} proc, {len(containers)} ctr"
    return Row(name, proc.returncode, leftovers, _records(d), _status(d), f"{stop_s:.1f}", note)


def _env() -> dict[str, str]:
    # vLLM's default process layout (engine core + worker process): "nothing left" covers both
    return {k: v for k, v in os.environ.items() if k != "VLLM_ENABLE_V1_MULTIPROCESSING"}


def _send(sig: int) -> Callable[[psutil.Process], str]:
    def fault(me: psutil.Process) -> str:
        os.kill(me.pid, sig)
        return ""
    return fault


def _kill_server(me: psutil.Process) -> str:
    servers = [p for p in me.children(recursive=True) if "vllm.entrypoints" in " ".join(_cmd(p))
               or "serve" in _cmd(p)[1:3]]
    for p in servers:
        p.kill()
    return f"killed {len(servers)} server process(es)"


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except psutil.NoSuchProcess:
        return []


def _http_fault(name: str, out: Path, handler, *extra: str, n: int = 4) -> Row:
    with ThreadedServer(handler, openai_routes()) as s:
        t0 = time.time()
        proc = subprocess.Popen([COMPARE, "run", "--backends", f"openai@{s.url}", "--num-requests", str(n),
                                 "--input-len", "8", "--output-len", "4", "--concurrency", "4", "--warmup", "0",
                                 "--out", str(out), "--run-id", name, *extra], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        me = psutil.Process(proc.pid)
        tag = f"{me.pid}:{me.create_time():.2f}"
        _, err = proc.communicate(timeout=600)
    d = out / name
    time.sleep(2)
    left = f"{len(tagged(tag))} proc, {len(_containers(proc.pid))} ctr"
    last = [ln for ln in err.splitlines() if ln.startswith(("interrupted", "error"))]
    return Row(name, proc.returncode, left, _records(d), _status(d), f"{time.time() - t0:.1f}",
               (last[-1] if last else "")[:110])


def _full_disk(out: Path) -> Row:
    where = Path(tempfile.mkdtemp(prefix="bench-faults-disk-"))
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200k", "tmpfs", str(where)], capture_output=True, text=True)
    if m.returncode != 0:
        return Row("full-disk", "-", "-", "-", "-", "-", f"no tmpfs here ({m.stderr.strip()[:60]})")
    try:
        row = _http_fault("full-disk", where, openai_stream(4), n=300)
    finally:
        subprocess.run(["umount", str(where)], check=False)
    return row


def _same_run_id(out: Path) -> Row:
    with ThreadedServer(openai_stream(4), openai_routes()) as s:
        argv = [COMPARE, "run", "--backends", f"openai@{s.url}", "--num-requests", "4", "--input-len", "8",
                "--output-len", "4", "--concurrency", "4", "--warmup", "0", "--out", str(out), "--run-id", "same"]
        procs = [subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        res = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    loser = next((e for (_, e), p in zip(res, procs) if p.returncode == 2), "")
    return Row("same-run-id x2", "/".join(map(str, codes)), "-", _records(out / "same"),
               _status(out / "same"), "-", (loser.strip().splitlines() or [""])[-1][:110])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated fault names")
    args = ap.parse_args()
    from backends.models.tiny import ensure_tiny_model

    model = str(ensure_tiny_model())
    vllm = ["--backends", "vllm", "--model", model, *SPEC, *LOAD]
    server = ["--backends", "vllm-server", "--model", model, *SPEC, *LOAD]
    container = ["--backends", "vllm-container", "--model", model, *SPEC, *LOAD,
                 "--native", "vllm-container.env=VLLM_ENABLE_V1_MULTIPROCESSING=0"]
    bad_event = b'data: {"choices": [{"index": 0, "text": "t", "token_ids": ["x"]}]}\n\n'
    out = Path(tempfile.mkdtemp(prefix="bench-faults-"))
    faults: dict[str, Callable[[], Row]] = {
        "sigint-vllm": lambda: _run_with_fault("sigint-vllm", out, vllm, _send(signal.SIGINT)),
        "sigterm-vllm": lambda: _run_with_fault("sigterm-vllm", out, vllm, _send(signal.SIGTERM)),
        "sighup-vllm": lambda: _run_with_fault("sighup-vllm", out, vllm, _send(signal.SIGHUP)),
        "sigkill-vllm": lambda: _run_with_fault("sigkill-vllm", out, vllm, _send(signal.SIGKILL)),
        "sigterm-vllm-server": lambda: _run_with_fault("sigterm-vllm-server", out, server, _send(signal.SIGTERM)),
        "sigterm-vllm-container": lambda: _run_with_fault("sigterm-vllm-container", out, container,
                                                          _send(signal.SIGTERM)),
        "server-killed": lambda: _run_with_fault("server-killed", out, server, _kill_server),
        "hung-server": lambda: _http_fault("hung-server", out, silent_response(), "--timeout", "3"),
        "malformed-stream": lambda: _http_fault("malformed-stream", out, sse_response([bad_event])),
        "full-disk": lambda: _full_disk(out),
        "same-run-id": lambda: _same_run_id(out),
    }
    only = set(args.only.split(",")) if args.only else set(faults)
    rows = []
    for name, run in faults.items():
        if name in only:
            rows.append(run())
            print(f"done: {rows[-1]}", file=sys.stderr)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; "
          f"date {time.strftime('%Y-%m-%d %H:%M %Z')}")
    # s: from the fault to the tool's exit (signals, a killed server); the whole run (the others)
    print("| fault | exit | left running | records kept | run status | s | message |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.fault} | {r.exit_code} | {r.leftovers} | {r.records} | {r.status} | {r.stop_s} | "
              f"{r.note.replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
