"""GPU validation: real vLLM, one call on the GPU machine, results that survive a cut-off.

Phases, most important first, each in its own process group with a deadline:
  env        nvidia-smi, package versions
  microbench copy bandwidth + bf16 matrix rate (the roofline's ceilings)
  offline    vLLM's own LLM.generate on the workload (the yardstick), engine config matched to the
             in-process backend (log stats on) + single-stream decode
  offline-default  the same with LLM's default config (stats off), throughput only
  inproc     `compare run --backends vllm`: closed-loop concurrency levels, a Poisson rate sweep and
             a burst (rate=inf, the level compared with LLM.generate)
  server     the same through vLLM's OpenAI server (`--backends vllm-server`): API overhead
  inproc-c1 / server-c1   concurrency 1 on a short request list (single-stream TTFT/TPOT)
  report     roofline tables (benchmarks/gpu/report.py)
After every phase the work directory is packed into --pack (atomic rename), so whatever ran is
returned even if the machine's time runs out. A GPU-memory sampler (nvidia-smi, 1 s) records the
peak per phase.

  python benchmarks/gpu/validate.py --work /tmp/val --pack $OUT/results.tgz --deadline-s 560
  (CPU rehearsal: --spec benchmarks/gpu/cpu.spec.yaml --workload benchmarks/gpu/cpu-chat.workload.yaml
   --model-dir TINY_MODEL --concurrency 2 --rate 50,inf --c1-requests 3)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from benchmarks.gpu.common import ENGINE_ENV  # noqa: E402
from core.fsutil import write_json_atomic  # noqa: E402

PHASES = ["env", "microbench", "offline", "inproc", "offline-default", "server", "inproc-c1", "server-c1",
          "inproc-burst", "inproc-burst-asyncio", "server-rates", "inproc-burst-nostats", "offline-nostats",
          "report"]
# rough seconds each needs (cold compile for the first engine); a phase is skipped rather than
# started when less than this is left, so the pack at the end still happens
MIN_S = {"env": 5, "microbench": 20, "offline": 120, "inproc": 90, "offline-default": 45, "server": 100,
         "inproc-c1": 40, "server-c1": 50, "inproc-burst": 60, "inproc-burst-asyncio": 40,
         "server-rates": 80, "inproc-burst-nostats": 60, "offline-nostats": 45, "report": 5}
# the 2% question (in-process vs LLM.generate): the burst level alone, repeated (an engine start
# each), on uvloop (the default) and on the standard asyncio loop; the server's Poisson rate levels
PHASE_ENV = {"inproc-burst-asyncio": {"LLM_COMPARE_LOOP": "asyncio"}}


class GpuSampler(threading.Thread):
    """Peak device memory and mean utilisation per phase, from nvidia-smi (absent on a CPU)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.phase = "idle"
        self.stats: dict[str, dict] = {}
        self.ok = shutil.which("nvidia-smi") is not None
        self._stop = threading.Event()

    def run(self) -> None:
        while self.ok and not self._stop.wait(1.0):
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total,utilization.gpu",
                                      "--format=csv,noheader,nounits"], capture_output=True, text=True,
                                     timeout=5).stdout.splitlines()[0]
                used, total, util = (float(x) for x in out.split(","))
            except (OSError, subprocess.SubprocessError, ValueError, IndexError):
                continue
            s = self.stats.setdefault(self.phase, {"samples": 0, "max_used_mib": 0.0, "util_sum": 0.0})
            s["samples"] += 1
            s["max_used_mib"] = max(s["max_used_mib"], used)
            s["total_mib"] = total
            s["util_sum"] += util
            s["mean_util_pct"] = s["util_sum"] / s["samples"]

    def stop(self) -> None:
        self._stop.set()


def _run(cmd: list[str], log: Path, timeout: float, env: dict[str, str]) -> dict:
    """One phase: own process group, output to its log, killed as a group at the deadline."""
    t0 = time.perf_counter()
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            rc = "timeout"
        finally:
            try:  # engine-core / server children left behind by a crash
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return {"rc": rc, "wall_s": round(time.perf_counter() - t0, 1)}


def _pack(work: Path, pack: Path | None) -> None:
    if pack is None:
        return
    tmp = pack.with_name(pack.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as t:
        t.add(work, arcname=work.name)
    os.replace(tmp, pack)


def _compare_run(a: argparse.Namespace, backend: str, run_id: str, c1: bool) -> list[str]:
    spec = HERE / "h200-nostats.spec.yaml" if run_id.endswith("-nostats") else a.spec
    cmd = [sys.executable, "-m", "compare.cli", "run", "--backends", backend, "--spec", str(spec),
           "--model", str(a.model_path), "--workload", str(a.workload), "--out", str(a.work / "runs"),
           "--run-id", run_id, "--warmup", "2", "--timeout", "300"]
    if run_id.startswith("inproc-burst"):
        cmd += ["--rate", "inf", "--repeats", str(a.burst_repeats)]
        return cmd + (["--num-requests", str(a.num_requests)] if a.num_requests else [])
    if run_id == "server-rates":
        cmd += ["--rate", a.server_rates]
        return cmd + (["--num-requests", str(a.num_requests)] if a.num_requests else [])
    if c1:
        return cmd + ["--concurrency", "1", "--num-requests", str(a.c1_requests)]
    cmd += ["--concurrency", a.concurrency, "--rate", a.rate]
    return cmd + (["--num-requests", str(a.num_requests)] if a.num_requests else [])


def _phase_cmd(name: str, a: argparse.Namespace) -> list[str]:
    py = sys.executable
    if name == "env":
        return [py, str(HERE / "envinfo.py"), str(a.work / "env.json")]
    if name == "microbench":
        return [py, str(HERE / "microbench.py"), str(a.work / "microbench.json")] + (["--small"] if a.small else [])
    if name == "offline-nostats":  # LLM.generate with stats off, pinned to the nostats burst's limits
        return [py, str(HERE / "offline.py"), "--spec", str(HERE / "h200-nostats.spec.yaml"),
                "--model", str(a.model_path), "--workload", str(a.workload), "--out", str(a.work / f"{name}.json"),
                "--repeats", str(a.repeats), "--log-stats", "default", "--skip-single-stream",
                "--match-run", str(a.work / "runs" / "inproc-burst-nostats" / "run.json")]
    if name.startswith("offline"):
        # offline: the in-process backend's exact engine config (log stats on) + single stream;
        # offline-default: LLM's own defaults (stats off), throughput only
        dflt = name == "offline-default"
        match = a.work / "runs" / "inproc-burst" / "run.json"  # when the burst phase ran first
        return [py, str(HERE / "offline.py"), "--spec", str(a.spec), "--model", str(a.model_path),
                "--workload", str(a.workload), "--out", str(a.work / f"{name}.json"),
                "--repeats", str(a.repeats), "--decode-tokens", str(a.decode_tokens),
                "--log-stats", "default" if dflt else "on"] + (["--skip-single-stream"] if dflt else []) + (
                    ["--num-requests", str(a.num_requests)] if a.num_requests else []) + (
                    ["--match-run", str(match)] if match.exists() and not dflt else [])
    if name == "report":
        return [py, str(HERE / "report.py"), str(a.work)]
    backend = "vllm" if name.startswith("inproc") else "vllm-server"
    return _compare_run(a, backend, name, c1=name.endswith("-c1"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="work directory (results land here)")
    ap.add_argument("--pack", type=Path, help="tar.gz of the work directory, rewritten after every phase")
    ap.add_argument("--deadline-s", type=float, default=560.0, help="stop starting phases after this")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--spec", type=Path, default=HERE / "h200.spec.yaml")
    ap.add_argument("--workload", type=Path, default=HERE / "chat.workload.yaml")
    ap.add_argument("--model-config", type=Path, default=HERE / "qwen2.5-7b-config.json",
                    help="config.json of the architecture (weights are dummy)")
    ap.add_argument("--model-dir", type=Path, help="use this model directory instead of --model-config")
    ap.add_argument("--num-requests", type=int, help="override the workload's request count")
    ap.add_argument("--concurrency", default="8,32,128")
    ap.add_argument("--rate", default="15,30,60,inf")
    ap.add_argument("--c1-requests", type=int, default=16)
    ap.add_argument("--burst-repeats", type=int, default=3, help="engine starts of the inproc-burst phases")
    ap.add_argument("--server-rates", default="15,30,inf", help="levels of the server-rates phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--small", action="store_true", help="small microbenchmark sizes (CPU rehearsal)")
    a = ap.parse_args(argv)
    t_start = time.perf_counter()
    a.work.mkdir(parents=True, exist_ok=True)
    (a.work / "logs").mkdir(exist_ok=True)
    if a.model_dir:
        a.model_path = a.model_dir.resolve()
    else:  # a config-only model directory: vLLM's dummy loader needs nothing else
        a.model_path = a.work / "model"
        a.model_path.mkdir(exist_ok=True)
        shutil.copy(a.model_config, a.model_path / "config.json")
    env = {**os.environ, **{k: os.environ.get(k, v) for k, v in ENGINE_ENV.items()}}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    state = {"started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "argv": sys.argv[1:],
             "spec": a.spec.read_text(), "workload": a.workload.read_text(), "phases": {}}
    sampler = GpuSampler()
    sampler.start()
    wanted = [p.strip() for p in a.phases.split(",") if p.strip()]
    unknown = set(wanted) - set(PHASES)
    if unknown:
        print(f"error: unknown phase(s) {sorted(unknown)}; known: {PHASES}", file=sys.stderr)
        return 2
    try:
        for name in wanted:
            left = a.deadline_s - (time.perf_counter() - t_start)
            if left < MIN_S[name] and name != "report":
                state["phases"][name] = {"rc": "skipped", "reason": f"{left:.0f}s left < {MIN_S[name]}s"}
                print(f"VALIDATE skip {name}: {left:.0f}s left", flush=True)
                continue
            sampler.phase = name
            print(f"VALIDATE start {name} ({left:.0f}s left)", flush=True)
            # the report is pure arithmetic on what is already on disk: it always gets its time
            res = _run(_phase_cmd(name, a), a.work / "logs" / f"{name}.log",
                       max(left, 60.0) if name == "report" else left, {**env, **PHASE_ENV.get(name, {})})
            res["gpu"] = sampler.stats.get(name)
            state["phases"][name] = res
            sampler.phase = "idle"
            print(f"VALIDATE done {name}: {res}", flush=True)
            write_json_atomic(a.work / "phases.json", state)
            _pack(a.work, a.pack)
    finally:
        sampler.stop()
        state["wall_s"] = round(time.perf_counter() - t_start, 1)
        write_json_atomic(a.work / "phases.json", state)
        _pack(a.work, a.pack)
    bad = [n for n, r in state["phases"].items() if r.get("rc") not in (0, "skipped")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
