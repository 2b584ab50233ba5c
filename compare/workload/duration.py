"""Time-bounded open-loop levels (``--duration SECONDS``).

A ``--rate`` level with a duration sends every request whose seeded send offset falls inside the
duration, and no other: the level's request count comes from the arrival process, not from the
length of the list, so a slower engine faces the same sends for the same time instead of a list
that drains after the last send. The count is fixed before any backend runs (the same prefix of
the same list on every backend, like ``--requests-per-stream``), and recorded in run.json.

Steady state: the duration holds a warm-up, the measured window and a cool-down. Requests due in
the warm-up (the engine's batch still filling from empty) or finished after the window are
trimmed from the level's statistics (compare/analysis/steady.py); the cool-down's sends keep the
load on while the window's last requests finish, so every counted request ran under the full
load. By default each is a tenth of the duration: the ramp from an empty engine lasts about one
request's latency, a small part of any level long enough to measure a steady state, and 80% of
the sends stay measured.
"""
from __future__ import annotations

import bisect
import dataclasses
import math

from compare.workload.arrivals import level_offsets_ns
from compare.workload.schedule import LoadLevel


DEFAULT_TRIM_SHARE = 0.1  # warm-up and cool-down, each, as a share of the duration


def trims(duration_s: float | None, warmup_s: float | None, cooldown_s: float | None
          ) -> tuple[float, float] | None:
    """(warm-up, cool-down) seconds of a duration (a tenth each by default); None without one.

    ValueError (one line) for a trim without ``--duration``, a negative one, or trims that leave
    no measured window."""
    if duration_s is None:
        for name, v in (("--warmup-seconds", warmup_s), ("--cooldown-seconds", cooldown_s)):
            if v is not None:
                raise ValueError(f"{name} trims time-bounded levels: add --duration SECONDS (e.g. --duration 60)")
        return None
    w = DEFAULT_TRIM_SHARE * duration_s if warmup_s is None else warmup_s
    c = DEFAULT_TRIM_SHARE * duration_s if cooldown_s is None else cooldown_s
    for name, v in (("--warmup-seconds", w), ("--cooldown-seconds", c)):
        if not (v >= 0 and math.isfinite(v)):
            raise ValueError(f"{name} {v:g}: must be a finite number of seconds >= 0 (0: nothing trimmed)")
    if w + c >= duration_s:
        raise ValueError(f"--warmup-seconds {w:g} + --cooldown-seconds {c:g} leave no measured window in "
                         f"--duration {duration_s:g}; shorten them or lengthen the duration")
    return round(w, 9), round(c, 9)


def bound_levels(levels: list[LoadLevel], duration_s: float | None, n_requests: int, seed: int,
                 warmup_s: float | None = None, cooldown_s: float | None = None) -> list[LoadLevel]:
    """The levels with each open-loop level cut to the sends inside ``duration_s``, its warm-up
    and cool-down (``trims``) recorded on it.

    ValueError (one line naming the option and the fix) for a bad duration or trim, a closed-loop
    or burst level, or a request list that runs out before the duration ends."""
    if duration_s is not None and not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f"--duration {duration_s:g}: must be a finite number of seconds > 0, e.g. --duration 60")
    trim = trims(duration_s, warmup_s, cooldown_s)
    if duration_s is None or trim is None:
        return levels
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
        out.append(dataclasses.replace(lv, requests=max(1, inside), duration_s=duration_s,
                                       warmup_s=trim[0], cooldown_s=trim[1]))
    return out


def time_bounded(level: LoadLevel, duration_s: float | None, n_requests: int, seed: int,
                 warmup_s: float | None = None, cooldown_s: float | None = None) -> LoadLevel:
    """One open-loop level cut to the sends inside ``duration_s`` and trimmed like ``--rate``'s (a
    search probe): when the list runs out first, the probe sends it all and stays count-bounded
    (no ``duration_s`` recorded, nothing trimmed)."""
    if duration_s is None or level.kind != "rate" or math.isinf(level.value):
        return level
    inside = bisect.bisect_left(level_offsets_ns(level, n_requests, seed), int(duration_s * 1e9))
    if inside >= n_requests:
        return level
    w, c = trims(duration_s, warmup_s, cooldown_s) or (None, None)
    return dataclasses.replace(level, requests=max(1, inside), duration_s=duration_s, warmup_s=w, cooldown_s=c)
