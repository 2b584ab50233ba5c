"""run.json sections whose shape other features fix: the Ray cluster a run used
(compare/running/ray_*.py), the quantization check of each backend (compare/quality/verify.py) and
the runs `compare merge` pooled (compare/running/merge.py).

Open (extra keys kept) where an older or newer writer may add a key readers do not need; the
keys listed are the ones every writer so far has produced. Engine-reported parts stay plain
dicts: what an engine says it loaded differs per engine.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field

from core.results.base import Open as _Open


class RayNode(_Open):
    node_id: str
    ip: str | None = None
    resources: dict[str, float] = Field(default_factory=dict)  # Ray's resource names -> amounts


class RayCell(_Open):
    """Where one cell (backend x repeat) ran and how long it queued and took."""

    backend: str
    repeat: int
    ok: bool
    resources: dict[str, Any] = Field(default_factory=dict)  # the Ray task options it asked for
    node_id: str | None = None
    ip: str | None = None
    host: str | None = None
    pid: int | None = None
    queued_s: float | None = None
    wall_s: float | None = None


class LoadShard(_Open):
    """One load generator of a level: its node and its clock's offset from the driver's."""

    node_id: str | None = None
    ip: str | None = None
    host: str | None = None
    pid: int | None = None
    offset_ms: float | None = None
    error_ms: float | None = None
    requests: int | None = None
    concurrency: int | None = None
    start_skew_ms: float | None = None  # when it started vs the common start, on the driver's clock
    late_call_ms: float | None = None  # the start order reached it after the start


class LevelShards(_Open):
    backend: str
    level: str
    shards: list[LoadShard] = Field(default_factory=list)


class QuantVerification(_Open):
    """Loaded vs requested quantization. ``valid`` None: not verifiable (the engine said nothing,
    or its description could not be read: ``reason``)."""

    valid: bool | None = None
    status: str | None = None  # valid | invalid | unverified | error
    requested: dict[str, Any] | None = None  # adapters/quant.py scheme_of_spec: weights, dtype, kv cache
    framework: str | None = None
    problems: list[str] = Field(default_factory=list)
    reason: str | None = None
    loaded: dict[str, Any] | None = None  # as the engine reported it: engine-specific


class MergedInput(_Open):
    """One results directory ``compare merge`` pooled into this run (compare/running/merge.py)."""

    run_id: str
    path: str  # as given on the command line, resolved
    started_at: str | None = None
    # backend -> the merged run's repeat numbers its repeats became (its own repeats in order)
    backends: dict[str, list[int]] = Field(default_factory=dict)
