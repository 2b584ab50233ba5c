"""An SLO as run.json and tune.json store it: its limits and, per level or probe, each limit's check
(core/slo.py parses and applies them). Apart from core/results/models.py so that the sections
that repeat them (max-rate probes, tuning probes) need not import the whole run model."""
from __future__ import annotations

from core.results.base import Closed as _Closed


class SloCheck(_Closed):
    value_ms: float | None  # NaN/None when the metric has no value (no ok request)
    limit_ms: float
    met: bool


class SloLimit(_Closed):
    metric: str
    stat: str
    limit_ms: float
