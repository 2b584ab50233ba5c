"""Cost per million output tokens, counting every device a backend occupies.

A topology's spec is the run's spec (``tensor_parallel`` 1 unless set): ``tp@2*vllm`` runs one engine
over 2 devices and ``replicas@2*vllm`` two engines of ``tensor_parallel`` devices each, K of them
sharing a device with ``:per_device=K`` (backends/topology/backend.py), so the devices come from the backend's name and its spec, never from the
spec alone. A knob variant (``tp@2*vllm[block_size=32]``) occupies what its base does.
"""
from __future__ import annotations

from typing import Any

from adapters.variants import split_variant
from backends.topology.target import KINDS, Topology
from core.errors import UserError


def devices(name: str, spec: Any) -> int:
    """Devices ``name`` occupies: a topology's (Topology.devices), else its tensor_parallel."""
    tp = int(getattr(spec, "tensor_parallel", 1) or 1)
    base, _ = split_variant(name)
    if base.partition("@")[0].strip() not in KINDS:
        return tp
    try:
        return Topology.from_name(base).devices(tp)
    except UserError:  # not a topology name after all: a plain backend's devices
        return tp


def cost_per_million(price_per_device_hour: float, n_devices: int, output_tok_s: float) -> float | None:
    """$ per million output tokens = price x devices / output tokens per hour x 1e6."""
    if not output_tok_s or output_tok_s <= 0:
        return None
    return price_per_device_hour * n_devices / (output_tok_s * 3600.0) * 1e6
