"""The client's health over one level, as run.json stores it (compare/analysis/client_health.py
computes it from the loop-lag monitor's wake-ups and the level's records)."""
from __future__ import annotations

from pydantic import Field

from core.results.base import Closed as _Closed


class StallHits(_Closed):
    """One metric's observations that fell inside a stall of the client's loop (compare/analysis/client_health.py)."""

    n: int  # observations (first tokens, later token events, or sends)
    in_stalls: int
    share: float
    max_lag_ms: float  # the longest stall any of them met


class ClientHealth(_Closed):
    """The client over the level (compare/analysis/client_health.py): how late its loop woke,
    for how much of the level, and which metrics' observations it may have delayed."""

    window_s: float
    samples: int
    stall_ms: float  # a wake-up later than this is a stall
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    lag_max_at_s: float | None = None  # when the longest stall ended, from the level's start
    stalls: int
    lagged_share: float  # sum of the stalls / the level's length
    affected: dict[str, StallHits] = Field(default_factory=dict)  # "ttft" | "itl" | "send"
    fell_behind: bool  # the level's client_lagged
    why: str | None = None
    # requests whose writer lost its CPU around the send (stamped before the write): how many, and
    # the longest such window (their TTFT may hold up to that much client time); absent: none
    preempted_sends: int | None = None
    preempted_send_max_ms: float | None = None
