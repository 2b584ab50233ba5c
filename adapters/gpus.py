"""The GPUs a plan can be made for by name, with their CUDA compute capability: `compare plan
--device cuda --gpu H200` plans for a GPU box from any machine (a laptop without a GPU, an
AVX2-only CPU box) instead of for the machine the command runs on.

Compute capabilities from NVIDIA's CUDA GPU list (developer.nvidia.com/cuda-gpus); a GPU not
listed here is named with ``--compute-capability`` beside ``--gpu``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from adapters.target import Machine
from core.errors import UserError

# short name (as a user types it, matched case-insensitively inside nvidia-smi's full name) -> sm
COMPUTE_CAPABILITY: Mapping[str, str] = MappingProxyType({
    "T4": "7.5", "A10": "8.6", "A10G": "8.6", "A40": "8.6", "A100": "8.0", "A30": "8.0",
    "RTX 3090": "8.6", "RTX 4090": "8.9", "L4": "8.9", "L40": "8.9", "L40S": "8.9",
    "H100": "9.0", "H200": "9.0", "GH200": "9.0", "B200": "10.0", "GB200": "10.0",
})


def compute_capability_of(gpu: str) -> str | None:
    """The listed GPU whose name ``gpu`` is or contains ("NVIDIA H200" -> 9.0); the longest listed
    name wins (GH200 before H200). None: not listed."""
    g = gpu.upper()
    hits = [k for k in COMPUTE_CAPABILITY if k in g]
    return COMPUTE_CAPABILITY[max(hits, key=len)] if hits else None


def planned_machine(device: str, gpu: str | None = None, compute_capability: str | None = None,
                    cpu_flags: frozenset[str] | None = None) -> Machine:
    """The machine a plan is made for, from the user's words. ``--gpu`` or ``--compute-capability``
    without ``--device cuda`` is refused (a CPU plan would ignore them)."""
    if device != "cuda":
        if gpu or compute_capability:
            raise UserError("--gpu and --compute-capability describe a GPU: add --device cuda")
        return Machine("cpu", cpu_flags=cpu_flags)
    cc = compute_capability or (compute_capability_of(gpu) if gpu else None)
    if compute_capability:
        major, dot, minor = compute_capability.partition(".")
        if not (major.isdigit() and dot and minor.isdigit()):
            raise UserError(f"--compute-capability {compute_capability!r}: expected MAJOR.MINOR, e.g. 9.0 (H100/H200)")
    elif gpu and cc is None:
        raise UserError(f"--gpu {gpu!r}: not a GPU this tool knows the compute capability of "
                        f"({', '.join(COMPUTE_CAPABILITY)}); add --compute-capability MAJOR.MINOR")
    return Machine("cuda", gpu_name=gpu, compute_capability=cc, cpu_flags=cpu_flags)
