"""Who is the bottleneck: flags from a level's CPU/GPU telemetry (backends/telemetry.py).

A process "sits at" a core when its busiest thread used >= 90% of one core in most (>= half)
of the level's samples: a single saturated thread caps throughput whatever the other cores do.

- a server-side process saturated: "engine core CPU-bound" (with a GPU, its scheduling and
  input preparation hold the GPU back), "API server CPU-bound" (tokenizer/detokenizer and HTTP
  work in the server's front end). Without GPU telemetry the engine computes on the CPU, so a
  busy engine is expected there: the flag is kept for the report but not shown on the console.
- our own client saturated: its event-loop thread, combined with the loop-lag check
  (compare/running/executor.py): a lagging loop whose thread was not busy means the CPU was
  oversubscribed (the engine's threads took the cores), not that the client's own work is too much.
- the run's processes together near every core the client may use: oversubscribed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from core.results import LevelSummary, RunResults
from core.results.models import GpuInfo

MOST = 0.5  # share of samples in which the busiest thread was saturated
MIN_SAMPLES = 3  # fewer samples than this say nothing about "most of the level"
OVERSUBSCRIBED = 0.9  # share of the available cores the run's processes used together
ENGINE_ROLES = ("engine core", "engine worker", "engine process", "engine server")
CONTEXT_MIB = 600  # a CUDA context with torch's kernels loaded (H200, CUDA 13: ~500-600 MiB)
MEASURING_GPU_MIB = 2 * CONTEXT_MIB  # more than a context: the measuring process loaded something there


@dataclass(frozen=True)
class Flag:
    kind: str  # engine_cpu | api_cpu | client_cpu | oversubscribed | client_contended
    text: str
    console: bool  # worth a console line (an expected state, such as CPU inference, is not)


def level_flags(s: LevelSummary) -> list[Flag]:
    t = s.telemetry
    if t is None:
        return []
    out: list[Flag] = []
    on_gpu = t.gpu is not None
    util = [d.util_mean_pct for d in t.gpu.devices if d.util_mean_pct is not None] if t.gpu else []
    gpu_util = f"; GPU busy {sum(util) / len(util):.0f}%" if util else ""
    for p in t.processes:
        if p.samples < MIN_SAMPLES:
            continue
        busy = f"a thread at >= 90% of a core in {p.busy_frac:.0%} of the level, {p.mean_pct:.0f}% in all"
        if p.busy_frac >= MOST and (p.role in ENGINE_ROLES or p.role.startswith("container")):
            why = f"its CPU work holds the GPU back{gpu_util}" if on_gpu else "CPU inference: expected"
            out.append(Flag("engine_cpu", f"{p.role} CPU-bound ({why}; {busy})", on_gpu))
        elif p.busy_frac >= MOST and p.role == "API server":
            out.append(Flag("api_cpu", f"API server CPU-bound: tokenizer/detokenizer is the bottleneck ({busy})", True))
        elif p.busy_frac >= MOST and p.role == "client worker":  # --client-procs: one of our own
            out.append(Flag("client_cpu", f"client worker {p.pid} CPU-bound ({busy}); the client, not the "
                                          f"engine, limits this level", True))
    client = next((p for p in t.processes if p.role == "client"), None)
    if (client is not None and client.samples >= MIN_SAMPLES and client.busy_frac >= MOST
            and client.loop_thread_busy_frac is not None and client.loop_thread_busy_frac < MOST):
        # saturated, but not by the event loop: an engine that runs in our process (transformers'
        # generation thread), which is the engine's bottleneck, not the client's
        out.append(Flag("inproc_cpu", f"in-process engine thread CPU-bound (a thread at >= 90% of a core in "
                                      f"{client.busy_frac:.0%} of the level{gpu_util})", on_gpu))
    for g in (t.gpu.processes if t.gpu else []):
        if g.measuring and (g.mem_peak_mib or 0) > MEASURING_GPU_MIB:
            out.append(Flag("measuring_gpu", f"the measuring process held {g.mem_peak_mib:.0f} MiB of GPU memory "
                                              f"while the engine ran (a CUDA context is ~{CONTEXT_MIB} MiB): it "
                                              f"competes with the engine under test", True))
    from compare.analysis.client_health import lag_words
    total = sum(p.mean_pct for p in t.processes)
    used = f"this run {total / 100:.1f} of {t.cpu_cores} cores"
    if t.machine_cpu_busy_pct is not None:  # other work on the machine competes for the same cores
        over = t.machine_cpu_busy_pct >= OVERSUBSCRIBED * 100
        other = total < 0.7 * t.machine_cpu_busy_pct * t.cpu_cores  # most of the busy time is not ours
        used = f"machine {t.machine_cpu_busy_pct:.0f}% busy, {used}" + (", the rest other work" if other else "")
    else:
        over = t.cpu_cores > 0 and total >= OVERSUBSCRIBED * 100 * t.cpu_cores
    if client is not None and client.samples >= MIN_SAMPLES and (client.loop_thread_busy_frac or 0) >= MOST:
        lagged = f", {lag_words(s)}" if s.client_lagged else ""
        out.append(Flag("client_cpu", f"client CPU-bound: its event loop at {client.loop_thread_mean_pct:.0f}% "
                                      f"of a core{lagged}; the client, not the engine, limits this level", True))
    elif s.client_lagged and client is not None and over:
        out.append(Flag("client_contended", f"client fell behind ({lag_words(s)}), its thread at "
                                            f"{client.loop_thread_mean_pct or 0:.0f}%: CPU oversubscribed ({used})",
                        False))  # the loop-lag caveat says it once, under the table
    elif over:
        out.append(Flag("oversubscribed", f"CPU oversubscribed: {used}", False))
    return out


def console_line(s: LevelSummary) -> str | None:
    """One short line for the console, or None."""
    shown = [f.text for f in level_flags(s) if f.console]
    return "; ".join(shown) if shown else None


# GPU-only engines: a run with one of them expected a GPU here
GPU_FRAMEWORKS = ("tensorrt-llm",)


def gpu_expected(note: str, gpus: Sequence[GpuInfo], frameworks: Iterable[str]) -> bool:
    """Whether a missing GPU record is news: the run found a GPU (nvidia-smi), ran a GPU-only
    engine, or NVML is there but failed (a driver not loaded, no device visible). A machine
    without any NVIDIA software (no NVML library, no nvidia-ml-py) expected no GPU."""
    from backends.gpu_telemetry import NO_NVIDIA

    return bool(gpus) or any(f in GPU_FRAMEWORKS for f in frameworks) or not any(m in note for m in NO_NVIDIA)


def gpu_note(run: RunResults) -> str | None:
    """Why there is no GPU telemetry, said once per run (the first level that says it), and only
    where a GPU was expected (:func:`gpu_expected`); the record keeps the note either way."""
    frameworks = [b.describe.framework for b in run.backends.values() if b.describe is not None]
    for b in run.backends.values():
        for s in b.levels.values():
            if s.telemetry is not None and s.telemetry.gpu is None and s.telemetry.gpu_note:
                note = s.telemetry.gpu_note
                return note if gpu_expected(note, run.hardware.gpus, frameworks) else None
    return None


CPU_MEANING = ("sampled every 0.25 s while each level ran; 'busy': share of samples in which the process's "
               "busiest thread used >= 90% of a core; the client row is this tool's own process (with in-process "
               "vLLM it also runs vLLM's tokenizer and detokenizer), its loop thread the event loop that times "
               "every token")
GPU_MEANING = ("utilization: share of time a kernel ran (not SM occupancy); energy from the driver's counter "
               "(else power samples integrated); out tok/J: output tokens per joule of the GPUs sampled")
CPU_HEADERS = ["backend", "load", "process", "pid", "mean % core", "peak % core", "threads", "busy", "flags"]
GPU_HEADERS = ["backend", "load", "GPU", "util mean %", "util peak %", "mem peak MiB", "power mean W",
               "energy J", "out tok/s", "out tok/J"]


def cpu_rows(run: RunResults, name: Callable[[str], str] = str) -> list[list[str]]:
    """One row per process per level; the level's flags on its first row."""
    rows = []
    for b, res in run.backends.items():
        for label, s in res.levels.items():
            if s.telemetry is None:
                continue
            flags = "; ".join(f.text for f in level_flags(s))
            shown = [p for p in s.telemetry.processes if p.role == "client" or p.peak_pct >= 1]  # idle helpers: run.json
            for i, p in enumerate(shown):
                role = p.role + (f" (loop thread {p.loop_thread_mean_pct:.0f}%)"
                                 if p.loop_thread_mean_pct is not None else "")
                rows.append([name(b), label, role, str(p.pid), f"{p.mean_pct:.0f}", f"{p.peak_pct:.0f}",
                             str(p.threads), f"{p.busy_frac:.0%}", flags if i == 0 else ""])
            for note in s.telemetry.not_sampled or []:
                rows.append([name(b), label, note, "", "", "", "", "", ""])
    return rows


def gpu_rows(run: RunResults, name: Callable[[str], str] = str) -> list[list[str]]:
    rows = []
    for b, res in run.backends.items():
        for label, s in res.levels.items():
            g = s.telemetry.gpu if s.telemetry else None
            if g is None:
                continue
            for d in g.devices:
                rows.append([name(b), label, f"{d.index} {d.name}", _f(d.util_mean_pct), _f(d.util_peak_pct),
                             _f(d.mem_used_peak_mib, "{:.0f}"), _f(d.power_mean_w, "{:.0f}"),
                             f"{d.energy_j:.0f}" + ("" if d.energy_source == "counter" else " (integrated)"),
                             f"{s.output_tok_s:.1f}",
                             _f(s.output_tokens / d.energy_j if d.energy_j > 0 and len(g.devices) == 1
                                else g.output_tok_per_j, "{:.3f}")])
    return rows


def _f(v: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def lag_explanations(run: RunResults) -> str:
    """For the loop-lag caveat: was each lagging level's client saturated itself, or starved of CPU?"""
    saturated, starved = [], []
    for b, res in run.backends.items():
        for label, s in res.levels.items():
            client = next((p for p in (s.telemetry.processes if s.telemetry else []) if p.role == "client"), None)
            if not s.client_lagged or client is None or client.loop_thread_mean_pct is None:
                continue
            kinds = {f.kind for f in level_flags(s)}
            if "client_cpu" in kinds:
                saturated.append(f"{b} {label} (loop thread {client.loop_thread_mean_pct:.0f}%)")
            elif "client_contended" in kinds:
                starved.append(f"{b} {label}")
    out = []
    if saturated:
        out.append(f"client's own work saturated its loop: {', '.join(saturated)}")
    if starved and not saturated and len(starved) == sum(s.client_lagged for r in run.backends.values()
                                                         for s in r.levels.values()):
        out.append("its loop thread was not saturated, the machine's CPU was oversubscribed")
    elif starved:
        out.append(f"loop thread not saturated, the machine's CPU was oversubscribed: {', '.join(starved)}")
    return "; ".join(out)


GPU_PROCESS_HEADERS = ["backend", "load", "process", "pid", "GPU mem peak MiB"]


def gpu_process_rows(run: RunResults, name: Callable[[str], str] = str) -> list[list[str]]:
    """Which process of the run held what GPU memory in each level (the measuring process marked)."""
    rows = []
    for b, res in run.backends.items():
        for label, s in res.levels.items():
            g = s.telemetry.gpu if s.telemetry else None
            for p in (g.processes if g else []):
                role = p.role + (" (measuring)" if p.measuring else "")
                rows.append([name(b), label, role, str(p.pid), _f(p.mem_peak_mib, "{:.0f}")])
    return rows
