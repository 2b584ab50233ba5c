"""Typed run.json ``levels[...].telemetry``: CPU use per process and GPU (NVML) samples during a
level (written by backends/telemetry.py; flags from them: compare/analysis/bottleneck.py)."""
from __future__ import annotations

from pydantic import Field

from core.results.base import Closed as _Closed


class ProcessCpu(_Closed):
    """One process during the level; percentages are of one core (all its threads together)."""

    role: str  # client | engine core | API server | engine worker | engine process | container ...
    pid: int
    name: str
    samples: int
    mean_pct: float
    peak_pct: float
    threads: int
    busy_frac: float  # share of samples in which its busiest thread used >= 90% of a core
    loop_thread_mean_pct: float | None = None  # the client's event-loop thread
    loop_thread_busy_frac: float | None = None


class GpuDevice(_Closed):
    index: int
    name: str
    samples: int
    util_mean_pct: float | None = None
    util_peak_pct: float | None = None
    mem_used_peak_mib: float | None = None
    power_mean_w: float | None = None
    power_peak_w: float | None = None
    sm_clock_mean_mhz: float | None = None
    energy_j: float
    energy_source: str  # "counter" (the driver's energy counter) | "power samples" (integrated)


class GpuProcess(_Closed):
    """A process holding GPU memory during the level (NVML's compute processes), its peak."""

    pid: int
    role: str  # engine core | API server | client (the measuring process) | ... (backends/telemetry.py)
    mem_peak_mib: float | None = None  # None: the driver does not say (e.g. another pid namespace)
    measuring: bool = False  # the process running the load generator and the measurement


class GpuLevel(_Closed):
    devices: list[GpuDevice]
    processes: list[GpuProcess] = Field(default_factory=list)
    wall_s: float
    energy_j: float  # all sampled devices together
    energy_source: str
    output_tok_per_j: float | None = None


class Telemetry(_Closed):
    interval_s: float
    samples: int
    wall_s: float
    cpu_cores: int  # cores this process may run on
    machine_cpu_busy_pct: float | None = None  # every core of the machine, this run's work or not
    processes: list[ProcessCpu] = Field(default_factory=list)
    not_sampled: list[str] | None = None  # e.g. a container whose processes are not visible here
    gpu: GpuLevel | None = None
    gpu_note: str | None = None  # why there is no GPU record ("no GPU telemetry: ...")
    error: str | None = None  # a sampling error (the level itself was measured)
