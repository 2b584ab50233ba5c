"""A per-request (or per-token) metric's distribution, as run.json writes it."""
from __future__ import annotations

from core.results.base import Closed as _Closed


class Dist(_Closed):
    """Distribution of one per-request (or per-token) metric, in ms unless the name says otherwise."""

    n: int
    mean: float
    p50: float
    p90: float
    p95: float
    p99: float
    min: float
    max: float

    def stat(self, name: str) -> float:
        return float(getattr(self, name))
