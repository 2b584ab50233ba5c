"""GPU telemetry through NVML (``nvidia-ml-py``, imported as ``pynvml``): what the devices did
during one load level.

Per device, sampled at the telemetry thread's interval (backends/telemetry.py): utilization
(``utilization.gpu``: the share of time a kernel ran, not how full the SMs were), memory used,
power and the SM clock. Energy over the level comes from the driver's own counter
(``nvmlDeviceGetTotalEnergyConsumption``, millijoules since the driver loaded; Volta and newer)
where the device has it, else from the power samples integrated over time (trapezoids), and
says which.

Devices: those named by ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, as CUDA reads it), else
every device NVML sees. NVML is optional: without the package, its library or a device, the
sampler is ``available`` False with one line saying why ("no GPU telemetry: ..."), and every
call is a no-op.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any


# what a note says when the machine has no NVIDIA software at all (pynvml's text for
# NVML_ERROR_LIBRARY_NOT_FOUND: no driver installed; or no nvidia-ml-py), as opposed to a driver
# that failed or a GPU NVML cannot see; reports say the former only where a GPU was expected
# (compare/analysis/bottleneck.py gpu_expected)
NO_NVIDIA = ("NVML Shared Library Not Found", "nvidia-ml-py is not installed")


def _visible(env: str | None, count: int, uuid_of: Any) -> list[int]:
    """NVML indices of the devices CUDA_VISIBLE_DEVICES names (all when it is unset)."""
    if env is None:
        return list(range(count))
    out: list[int] = []
    uuids = None
    for tok in (t.strip() for t in env.split(",")):
        if not tok:
            continue
        if tok.isdigit():
            if int(tok) < count:
                out.append(int(tok))
            continue
        if uuids is None:  # UUIDs (or their "GPU-..." prefixes) are matched like CUDA matches them
            uuids = [uuid_of(i) for i in range(count)]
        hit = [i for i, u in enumerate(uuids) if u.startswith(tok)]
        if len(hit) == 1:
            out.append(hit[0])
    return out


@dataclass
class _Device:
    index: int
    name: str
    handle: Any
    energy_mj0: int | None = None  # the driver's counter at the level's start (None: not supported)
    util: list[float] = field(default_factory=list)
    mem_mib: list[float] = field(default_factory=list)
    power_w: list[tuple[float, float]] = field(default_factory=list)  # (monotonic s, W)
    sm_mhz: list[float] = field(default_factory=list)


class NvmlSampler:
    """Not thread-safe by itself: one sampling thread calls ``start``/``sample``/``stop``."""

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        self.note: str | None = None  # why there is no GPU telemetry
        self._nv: Any = None
        self._devices: list[_Device] = []
        self._proc_mib: dict[int, float | None] = {}  # pid -> peak GPU memory over every sampled device
        try:
            import pynvml
        except ImportError:
            self.note = "no GPU telemetry: nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            self.note = f"no GPU telemetry: NVML is not usable here ({e})"
            return
        self._nv = pynvml
        try:
            count = pynvml.nvmlDeviceGetCount()
            env = cuda_visible_devices if cuda_visible_devices is not None else os.environ.get("CUDA_VISIBLE_DEVICES")

            def uuid_of(i: int) -> str:
                u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                return u.decode() if isinstance(u, bytes) else u

            for i in _visible(env, count, uuid_of):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                self._devices.append(_Device(i, name.decode() if isinstance(name, bytes) else name, h))
        except pynvml.NVMLError as e:
            self.note = f"no GPU telemetry: NVML could not list the devices ({e})"
        if not self._devices and self.note is None:
            self.note = "no GPU telemetry: NVML sees no GPU" + (
                f" among CUDA_VISIBLE_DEVICES={env}" if env is not None else "")
        if self.note is not None:
            self.close()

    @property
    def available(self) -> bool:
        return bool(self._devices) and self._nv is not None

    def _call(self, fn: str, *args: Any) -> Any:
        """One NVML query; None where the device does not support it (or it failed)."""
        try:
            return getattr(self._nv, fn)(*args)
        except self._nv.NVMLError:
            return None

    def start(self) -> None:
        self._t0 = time.monotonic()
        for d in self._devices:
            d.util.clear(), d.mem_mib.clear(), d.power_w.clear(), d.sm_mhz.clear()
            d.energy_mj0 = self._call("nvmlDeviceGetTotalEnergyConsumption", d.handle)
        self._proc_mib.clear()
        self.sample()

    def sample(self) -> None:
        nv = self._nv
        for d in self._devices:
            t = time.monotonic()
            u = self._call("nvmlDeviceGetUtilizationRates", d.handle)
            if u is not None:
                d.util.append(float(u.gpu))
            m = self._call("nvmlDeviceGetMemoryInfo", d.handle)
            if m is not None:
                d.mem_mib.append(m.used / 2**20)
            p = self._call("nvmlDeviceGetPowerUsage", d.handle)  # milliwatts
            if p is not None:
                d.power_w.append((t, p / 1000.0))
            c = self._call("nvmlDeviceGetClockInfo", d.handle, nv.NVML_CLOCK_SM)
            if c is not None:
                d.sm_mhz.append(float(c))
        self._sample_processes()

    def _sample_processes(self) -> None:
        """Each process's GPU memory, summed over the sampled devices, kept at its peak: which
        process of the run holds what (an engine, and whether the measuring process holds more
        than its CUDA context)."""
        now: dict[int, float | None] = {}
        for d in self._devices:
            for p in self._call("nvmlDeviceGetComputeRunningProcesses", d.handle) or ():
                used = getattr(p, "usedGpuMemory", None)
                mib = used / 2**20 if isinstance(used, int) and 0 <= used < 2**50 else None
                prev = now.get(p.pid)
                now[p.pid] = mib if prev is None else prev + (mib or 0.0)
        for pid, mib in now.items():
            old = self._proc_mib.get(pid)
            self._proc_mib[pid] = mib if old is None else max(old, mib or 0.0)

    def stop(self, output_tokens: int | None = None) -> dict[str, Any] | None:
        """The level's GPU record (run.json ``telemetry.gpu``); None when unavailable."""
        if not self.available:
            return None
        self.sample()
        wall = time.monotonic() - self._t0
        devices, total_j, sources = [], 0.0, set()
        for d in self._devices:
            end = self._call("nvmlDeviceGetTotalEnergyConsumption", d.handle) if d.energy_mj0 is not None else None
            if end is not None and d.energy_mj0 is not None and end >= d.energy_mj0:
                joules, src = (end - d.energy_mj0) / 1000.0, "counter"
            else:
                joules, src = _integrate(d.power_w), "power samples"
            total_j += joules
            sources.add(src)
            devices.append({
                "index": d.index, "name": d.name, "samples": len(d.util),
                "util_mean_pct": _mean(d.util), "util_peak_pct": max(d.util, default=None),
                "mem_used_peak_mib": round(max(d.mem_mib), 1) if d.mem_mib else None,
                "power_mean_w": _mean([w for _, w in d.power_w]),
                "power_peak_w": max((w for _, w in d.power_w), default=None),
                "sm_clock_mean_mhz": _mean(d.sm_mhz), "energy_j": round(joules, 3), "energy_source": src,
            })
        out: dict[str, Any] = {"devices": devices, "wall_s": round(wall, 3), "energy_j": round(total_j, 3),
                               "energy_source": " + ".join(sorted(sources)),
                               "processes": [{"pid": pid, "mem_peak_mib": None if m is None else round(m, 1)}
                                             for pid, m in sorted(self._proc_mib.items())]}
        if output_tokens is not None and total_j > 0:
            out["output_tok_per_j"] = round(output_tokens / total_j, 4)
        return out

    def close(self) -> None:
        if self._nv is not None:
            try:
                self._nv.nvmlShutdown()
            except self._nv.NVMLError:
                pass
            self._nv = None


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 2) if xs else None


def _integrate(samples: list[tuple[float, float]]) -> float:
    """Joules from (time s, watts) samples: the trapezoid rule."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))
