"""Typed run.json ``levels[...].steady_state``: what a time-bounded level measured (written by
compare/analysis/steady.py)."""
from __future__ import annotations

from core.results.base import Closed as _Closed


class SteadyState(_Closed):
    """A time-bounded level's measured window and the requests trimmed from its statistics."""

    duration_s: float  # the level's sends (warm-up + window + cool-down)
    window_s: list[float]  # [start, end] seconds from the level's start: what was measured
    counted: int  # requests in the level's statistics
    trimmed_warmup: int  # due before the window (kept in requests.jsonl, marked "warmup")
    trimmed_cooldown: int  # finished after the window (kept, marked "cooldown")
