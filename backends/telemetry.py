"""Who is busy during a load level: CPU use of every process the run owns, and the GPUs (NVML).

A thread (never the measuring event loop) samples at a fixed interval while a level runs (0.25 s;
``LLM_COMPARE_TELEMETRY_INTERVAL_S`` sets another):

- our own process (role ``client``; with in-process vLLM it also runs vLLM's API layer:
  tokenizer, detokenizer, output handling) and, inside it, the event loop's own thread (the one
  that started the sampler): a loop thread near 100% of a core is a saturated client;
- every descendant process, found afresh at each tick (engine cores, vLLM's API server,
  engine workers, engine processes; a replica started mid-run is picked up), each with a role
  read from its command line / process title (vLLM names its processes ``VLLM::EngineCore``,
  ``VLLM::Worker``, ``VLLM::APIServer``);
- the processes of the backend's Docker container, where they are visible from here (the
  container's main pid exists here and its cgroup names the container); else the record says
  the container was not sampled.

Per process: mean and peak % of one core (all threads together), thread count, and how often
its busiest thread sat at >= 90% of a core (``busy_frac``): one saturated thread is the
bottleneck a multi-core total can hide. compare/analysis/bottleneck.py turns the record into flags.

``python -m backends.telemetry --seconds 10 [--pid PID]`` samples this machine's GPUs (and the
given process tree) for N seconds and prints the record: a quick check of the NVML path on a GPU box.
"""
from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from backends.gpu_telemetry import NvmlSampler

INTERVAL_S = 0.25
RESCAN_S = 1.0  # how often the process tree is listed again (a process started since is picked up)
BUSY_PCT = 90.0  # a thread at or above this share of one core counts as saturated for that tick

# (substring of the command line / process title, role), first match wins: the server guard's
# command line holds the server's, so it comes first
_ROLES = (
    ("backends.server_process --guard", "server guard"), ("EngineCore", "engine core"), ("::Worker", "engine worker"),
    ("APIServer", "API server"), ("vllm serve", "API server"), ("vllm.entrypoints", "API server"),
    ("DPCoordinator", "engine coordinator"), ("containers.watchdog", "watchdog"),
    ("compare.running.multiproc", "client worker"), ("resource_tracker", "python helper"),
)


GUARD = _ROLES[0][0]


def role_of(cmdline: str, name: str, parent_cmdline: str = "") -> str:
    for needle, role in _ROLES:
        if needle in cmdline:
            return role
    if re.search(r"-m backends\.[\w.]*engine\b", cmdline):  # backends/engine_process.py children
        return "engine process"
    if GUARD in parent_cmdline:  # a server the tool launched (llama-server, ...): the engine itself
        return "engine server"
    return name or "other"


def _parent_cmdline(p: Any) -> str:
    try:
        parent = p.parent()
        return " ".join(parent.cmdline()) if parent is not None else ""
    except Exception:  # noqa: BLE001 - gone, or not ours to read: no parent role
        return ""


@dataclass
class _Proc:
    pid: int
    role: str
    name: str
    proc: Any  # psutil.Process
    last_cpu: float
    last_t: float
    last_threads: dict[int, float]
    last_threads_t: float = 0.0  # when last_threads was read (its own stamp: see sample())
    pct: list[float] = field(default_factory=list)
    top_thread_pct: list[float] = field(default_factory=list)
    loop_pct: list[float] = field(default_factory=list)  # the client's event-loop thread
    threads: int = 0
    last_loop: float | None = None  # the loop thread's CPU clock (our own process only)


def _thread_times(p: Any) -> dict[int, float]:
    return {t.id: t.user_time + t.system_time for t in p.threads()}


class ProcessSampler:
    """CPU use of a process tree (ours, plus extra roots such as a container's main pid)."""

    def __init__(self, root_pid: int | None = None, loop_tid: int | None = None,
                 extra_roots: dict[int, str] | None = None, loop_clock: int | None = None) -> None:
        import psutil

        self._psutil = psutil
        self.root_pid = root_pid or os.getpid()
        self.loop_tid = loop_tid
        # the loop thread's CPU clock (time.pthread_getcpuclockid): read with the process's own CPU
        # clock and the wall stamp in one GIL-held step, so the thread can never show more CPU in an
        # interval than its process (/proc reads release the GIL between files, and a busy loop
        # thread then runs between the process's read and its threads')
        self.loop_clock = loop_clock
        self.extra_roots = extra_roots or {}  # pid -> role prefix
        self._procs: dict[tuple[int, float], _Proc] = {}
        self._cached: list[tuple[Any, str | None]] = []
        self._scanned_at = -RESCAN_S

    def _tree(self) -> list[tuple[Any, str | None]]:
        # finding descendants reads every process's stat file (~3 ms with 150 processes): done
        # once a second, the known processes are sampled at every tick
        now = time.monotonic()
        if now - self._scanned_at < RESCAN_S:
            return self._cached
        self._scanned_at = now
        ps = self._psutil
        out: list[tuple[Any, str | None]] = []
        for pid, prefix in [(self.root_pid, None), *self.extra_roots.items()]:
            try:
                root = ps.Process(pid)
                out += [(root, prefix)] + [(c, prefix) for c in root.children(recursive=True)]
            except ps.Error:
                continue
        self._cached = out
        return out

    def sample(self) -> None:
        ps = self._psutil
        for p, prefix in self._tree():
            try:
                with p.oneshot():
                    # stamped at the read itself (oneshot reads /proc/PID/stat once, at the first
                    # call): a tick delayed part-way through the tree (a busy machine) would
                    # otherwise divide one process's CPU time by the wrong interval
                    now = time.monotonic()
                    key = (p.pid, p.create_time())
                    cpu = sum(p.cpu_times()[:2])
                    nthreads = p.num_threads()
                    tt = _thread_times(p)
                    # the threads' times are read after the process's, and in our own process the
                    # sampler may wait for the GIL in between (the event loop holds it while busy):
                    # they get a stamp of their own, or a busy loop thread could show more CPU in
                    # one interval than the whole process
                    tt_t = time.monotonic()
                    rec = self._procs.get(key)
                    if rec is None:  # first sight: the baseline; it counts from the next tick
                        cmd = " ".join(p.cmdline()) or p.name()
                        role = "client" if p.pid == os.getpid() else role_of(cmd, p.name(), _parent_cmdline(p))
                        if prefix is not None:
                            role = "container" if p.pid in self.extra_roots else f"container: {role}"
                        own = self._own_clocks() if p.pid == os.getpid() else None
                        self._procs[key] = _Proc(p.pid, role, (cmd.split() or ["?"])[0][:60], p,
                                                 own[1] if own else cpu, own[0] if own else now, tt,
                                                 last_threads_t=tt_t, threads=nthreads,
                                                 last_loop=own[2] if own else None)
                        continue
            except ps.Error:  # it ended between the listing and the read
                continue
            own = self._own_clocks() if p.pid == os.getpid() else None
            if own is not None:
                now, cpu = own[0], own[1]
            dt, dtt = now - rec.last_t, tt_t - rec.last_threads_t
            if dt <= 0 or dtt <= 0:
                continue
            rec.pct.append(100.0 * (cpu - rec.last_cpu) / dt)
            # a thread born since the last tick spent all its time within this interval
            per = {tid: 100.0 * (t - rec.last_threads.get(tid, 0.0)) / dtt for tid, t in tt.items()}
            rec.top_thread_pct.append(max(per.values(), default=0.0))
            if own is not None and rec.last_loop is not None:
                rec.loop_pct.append(100.0 * (own[2] - rec.last_loop) / dt)
                rec.last_loop = own[2]
            elif self.loop_tid is not None and rec.role == "client" and self.loop_tid in per:
                rec.loop_pct.append(per[self.loop_tid])
            rec.last_cpu, rec.last_t, rec.last_threads, rec.last_threads_t = cpu, now, tt, tt_t
            rec.threads = max(rec.threads, nthreads)

    def _own_clocks(self) -> tuple[float, float, float] | None:
        """(wall, process CPU, loop thread CPU) of this process, read back to back without
        releasing the GIL; None where the loop thread's clock is unknown or gone."""
        if self.loop_clock is None:
            return None
        try:
            now = time.monotonic()
            return now, time.clock_gettime(time.CLOCK_PROCESS_CPUTIME_ID), time.clock_gettime(self.loop_clock)
        except OSError:
            return None

    def summary(self) -> list[dict[str, Any]]:
        out = []
        for r in self._procs.values():
            if not r.pct:
                continue  # seen once only (it started or ended within one interval)
            row: dict[str, Any] = {
                "role": r.role, "pid": r.pid, "name": r.name, "samples": len(r.pct),
                "mean_pct": round(sum(r.pct) / len(r.pct), 1), "peak_pct": round(max(r.pct), 1),
                "threads": r.threads,
                "busy_frac": round(sum(x >= BUSY_PCT for x in r.top_thread_pct) / len(r.top_thread_pct), 3),
            }
            if r.loop_pct:
                row["loop_thread_mean_pct"] = round(sum(r.loop_pct) / len(r.loop_pct), 1)
                row["loop_thread_busy_frac"] = round(sum(x >= BUSY_PCT for x in r.loop_pct) / len(r.loop_pct), 3)
            out.append(row)
        # the client first, then by CPU use
        return sorted(out, key=lambda x: (x["role"] != "client", -x["mean_pct"]))


def container_roots(backend: Any) -> tuple[dict[int, str], list[str]]:
    """A container backend's main pid, where its processes are visible from here; else a note."""
    managed = getattr(backend, "container", None)
    container = getattr(managed, "container", None)
    if container is None:
        return {}, []
    cid = str(getattr(container, "id", ""))
    try:
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        with open(f"/proc/{pid}/cgroup") as f:
            visible = pid > 0 and cid[:12] in f.read()
    except Exception:  # docker API errors, no such pid here, attrs without State
        visible = False
    if not visible:
        return {}, [f"container {getattr(managed, 'name', cid[:12])}: not sampled (its processes are not "
                    f"visible from this process's pid namespace)"]
    return {pid: "container"}, []


class LevelTelemetry:
    """Samples CPU and GPUs in a thread for one level: ``with LevelTelemetry(backend) as t: ...``,
    then ``t.summary(output_tokens)`` is the level's run.json ``telemetry`` record."""

    def __init__(self, backend: Any = None, interval_s: float | None = None,
                 root_pid: int | None = None, gpu: NvmlSampler | None = None) -> None:
        self.interval_s = interval_s or float(os.environ.get("LLM_COMPARE_TELEMETRY_INTERVAL_S") or INTERVAL_S)
        roots, self.not_sampled = container_roots(backend) if backend is not None else ({}, [])
        # the thread entering the context runs the event loop whose saturation we look for
        self.cpu = ProcessSampler(root_pid, loop_tid=threading.get_native_id(), extra_roots=roots,
                                  loop_clock=time.pthread_getcpuclockid(threading.get_ident()))
        self.gpu = gpu if gpu is not None else NvmlSampler()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples = 0
        self._errors: list[str] = []

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._tick()

    def _tick(self) -> None:
        try:
            self.cpu.sample()
            self.gpu.sample()
            self._samples += 1
        except Exception as e:  # telemetry never breaks a measurement: it says what went wrong
            if not self._errors:
                self._errors.append(f"{type(e).__name__}: {e}")

    def __enter__(self) -> "LevelTelemetry":
        self._t0 = time.monotonic()
        self._machine0 = self.cpu._psutil.cpu_times()  # every core: is other work competing?
        self.cpu.sample()  # baselines
        self.gpu.start()
        self._thread = threading.Thread(target=self._loop, name="llm-compare-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._wall = time.monotonic() - self._t0
        self.cpu.sample()  # the last partial interval
        self._machine_busy = _busy_pct(self._machine0, self.cpu._psutil.cpu_times())

    def summary(self, output_tokens: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"interval_s": self.interval_s, "samples": self._samples,
                               "wall_s": round(getattr(self, "_wall", 0.0), 3),
                               "cpu_cores": len(os.sched_getaffinity(0)),
                               "machine_cpu_busy_pct": getattr(self, "_machine_busy", None),
                               "processes": self.cpu.summary()}
        if self.not_sampled:
            out["not_sampled"] = self.not_sampled
        gpu = self.gpu.stop(output_tokens)
        if gpu is not None:
            gpu["processes"] = [{**p, **_gpu_role(p["pid"])} for p in gpu.get("processes", [])]
            out["gpu"] = gpu
        else:
            out["gpu_note"] = self.gpu.note
        if self._errors:
            out["error"] = self._errors[0]
        self.gpu.close()
        return out


def _gpu_role(pid: int) -> dict[str, Any]:
    """Role of a process holding GPU memory, and whether it is this one: the measuring process."""
    if pid == os.getpid():
        return {"role": "client", "measuring": True}
    import psutil

    try:
        p = psutil.Process(pid)
        return {"role": role_of(" ".join(p.cmdline()), p.name(), _parent_cmdline(p)), "measuring": False}
    except (psutil.Error, OSError):
        return {"role": "other", "measuring": False}


def _busy_pct(t0: Any, t1: Any) -> float | None:
    """How busy the machine's cores were between two psutil.cpu_times(): 100 - idle - iowait."""
    total = sum(t1) - sum(t0)
    if total <= 0:
        return None
    idle = (t1.idle - t0.idle) + (getattr(t1, "iowait", 0.0) - getattr(t0, "iowait", 0.0))
    return round(100.0 * (1 - idle / total), 1)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m backends.telemetry",
                                 description="Sample CPU (a process tree) and GPUs (NVML) for N seconds; "
                                             "print the record a level of `compare run` stores.")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--pid", type=int, default=None, help="root of the process tree (default: this process)")
    ap.add_argument("--interval", type=float, default=INTERVAL_S)
    a = ap.parse_args(argv)
    tel = LevelTelemetry(interval_s=a.interval, root_pid=a.pid)
    with tel:
        time.sleep(a.seconds)
    print(json.dumps(tel.summary(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
