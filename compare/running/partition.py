"""One level divided among N load generators (client processes, Ray load shards).

Closed loop: the level's streams are spread as evenly as possible, the first parts taking one
more (c=10 over 4: 3,3,2,2). Open loop: the level's one Poisson schedule (from the workload seed)
is dealt round-robin, request i to part i mod N with its own arrival offset, so the parts together
offer exactly the schedule a single client would have.
"""
from __future__ import annotations

from dataclasses import dataclass

from compare.workload.schedule import LoadLevel, level_offsets_ns


@dataclass(frozen=True)
class Part:
    index: int  # 0-based
    requests: range  # round-robin indexes into the level's requests: index, index + N, ...
    streams: int  # closed loop: this part's share of the concurrency; open loop: 0
    offsets_ns: list[int] | None  # open loop: the arrival offsets of ``requests``, from the level start


def split_streams(streams: int, n: int) -> list[int]:
    """``streams`` over ``n`` parts, the first ``streams % n`` taking one more."""
    return [streams // n + (k < streams % n) for k in range(n)]


def partition(level: LoadLevel, n_requests: int, n: int, seed: int, *,
              streams: int | None = None) -> tuple[list[Part], list[int] | None]:
    """The ``n`` parts of ``level`` over ``n_requests`` requests, and the level's schedule (open
    loop; None closed loop). ``streams``: the closed-loop concurrency to divide (default: the
    level's own)."""
    if level.kind == "concurrency":
        per = split_streams(int(level.value) if streams is None else streams, n)
        return [Part(k, range(k, n_requests, n), per[k], None) for k in range(n)], None
    offsets = level_offsets_ns(level, n_requests, seed)
    return [Part(k, range(k, n_requests, n), 0, offsets[k::n]) for k in range(n)], offsets
