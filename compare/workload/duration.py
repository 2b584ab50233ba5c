"""Time-bounded open-loop levels (``--duration SECONDS``).

A ``--rate`` level with a duration sends every request whose seeded send offset falls inside the
duration, and no other: the level's request count comes from the arrival process, not from the
length of the list, so a slower engine faces the same sends for the same time instead of a list
that drains after the last send. The count is fixed before any backend runs (the same prefix of
the same list on every backend, like ``--requests-per-stream``), and recorded in run.json.
"""
from __future__ import annotations

import bisect
import dataclasses
import math

from compare.workload.arrivals import level_offsets_ns
from compare.workload.schedule import LoadLevel


def bound_levels(levels: list[LoadLevel], duration_s: float | None, n_requests: int, seed: int) -> list[LoadLevel]:
    """The levels with each open-loop level cut to the sends inside ``duration_s``.

    ValueError (one line naming the option and the fix) for a bad duration, a closed-loop or
    burst level, or a request list that runs out before the duration ends."""
    if duration_s is None:
        return levels
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f"--duration {duration_s:g}: must be a finite number of seconds > 0, e.g. --duration 60")
    out = []
    for lv in levels:
        if lv.kind != "rate" or math.isinf(lv.value):
            raise ValueError(f"--duration bounds --rate levels by time; level {lv.label} is not one "
                             f"(use --rate R with R finite, e.g. --rate 4,8 --duration 60)")
        offsets = level_offsets_ns(lv, n_requests, seed)
        inside = bisect.bisect_left(offsets, int(duration_s * 1e9))
        if inside >= n_requests:
            need = math.ceil(lv.value * duration_s * 1.2) + 1
            raise ValueError(f"--duration {duration_s:g} at {lv.label} needs more than the workload's "
                             f"{n_requests} requests; raise --num-requests to at least {need}")
        out.append(dataclasses.replace(lv, requests=max(1, inside), duration_s=duration_s))
    return out


def time_bounded(level: LoadLevel, duration_s: float | None, n_requests: int, seed: int) -> LoadLevel:
    """One open-loop level cut to the sends inside ``duration_s`` (a search probe): when the list
    runs out first, the probe sends it all and stays count-bounded (no ``duration_s`` recorded)."""
    if duration_s is None or level.kind != "rate" or math.isinf(level.value):
        return level
    inside = bisect.bisect_left(level_offsets_ns(level, n_requests, seed), int(duration_s * 1e9))
    if inside >= n_requests:
        return level
    return dataclasses.replace(level, requests=max(1, inside), duration_s=duration_s)
