"""Open-loop arrival processes: the gaps between a ``--rate R`` level's sends.

- ``poisson``: exponential gaps of mean 1/R (memoryless traffic; the default).
- ``constant``: every gap exactly 1/R (a metronome; the least queueing a rate can cause).
- ``gamma``: gamma gaps of mean 1/R and shape 1/burstiness, so the gaps' coefficient of
  variation squared equals the burstiness: 1 is Poisson, below 1 is smoother, above 1 sends in
  clumps with long quiet spells at the same mean rate.

Every process is drawn once from the workload seed, so each backend (and a replay with the same
seed and options) gets the same send offsets; the first send is at 0.
"""
from __future__ import annotations

import math

import numpy as np

ARRIVALS = ("poisson", "constant", "gamma")


def check_arrival(arrival: str, burstiness: float) -> None:
    """ValueError (a one-line message naming the option) for an unknown process or a bad burstiness."""
    if arrival not in ARRIVALS:
        raise ValueError(f"--arrival {arrival!r} is unknown; use one of {', '.join(ARRIVALS)}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"--burstiness {burstiness}: must be a finite number > 0 "
                         f"(1 is Poisson-like, e.g. --arrival gamma --burstiness 4)")


def label_suffix(arrival: str, burstiness: float) -> str:
    """What a level's label adds for a non-Poisson process (r8-const, r8-g4), so levels that
    differ only in their arrivals stay apart in results and reports."""
    if arrival == "constant":
        return "-const"
    if arrival == "gamma":
        return f"-g{burstiness:g}"
    return ""


def offsets_ns(n: int, rate: float, seed: int, arrival: str = "poisson", burstiness: float = 1.0) -> list[int]:
    """Send offsets (ns from the level's start) of n arrivals at ``rate`` req/s; the first is at 0."""
    check_arrival(arrival, burstiness)
    if math.isinf(rate) or n == 0:
        return [0] * n
    if arrival == "constant":
        return [int(round(k * 1e9 / rate)) for k in range(n)]
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=n)
    else:  # gamma: shape k = 1/burstiness, scale = mean/k keeps the mean gap at 1/rate
        shape = 1.0 / burstiness
        gaps = rng.gamma(shape, (1.0 / rate) / shape, size=n)
    gaps[0] = 0.0
    return [int(x) for x in np.cumsum(gaps) * 1e9]


def level_offsets_ns(level: object, n: int, seed: int) -> list[int]:
    """The send offsets of an open-loop ``LoadLevel`` over n requests: a replayed trace's own
    offsets where the level carries them (compare/workload/traces.py), else drawn."""
    trace = getattr(level, "offsets_ns", None)
    if trace is not None:
        return list(trace[:n])
    return offsets_ns(n, level.value, seed, getattr(level, "arrival", "poisson"),  # type: ignore[attr-defined]
                      getattr(level, "burstiness", 1.0))
