"""``compare run --find-max-rate`` in run.json (``backends[NAME].max_rate``): the SLO and load search
it ran with, one search per engine start with every probe, and the answer over the starts
(compare/tuning/max_rate.py searches and summarizes; its docstring defines the interval).

Closed: the layout has not changed since the option exists. ``LoadSearchInfo`` is also tune.json's
(core/results/tune.py): both record compare/tuning/probe.py's LoadSearch as it ran.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from core.results.base import Closed as _Closed
from core.results.slo import SloCheck, SloLimit


class LoadSearchInfo(_Closed):
    """compare/tuning/probe.py LoadSearch as it ran."""

    kind: str
    start: float
    tol: float
    max_probes: int
    repeats: int
    min_load: float | None = None
    max_load: float
    warmup: int
    timeout_s: float
    seed: int
    arrival: str = "poisson"  # rate searches: the probes' arrival process (--arrival)
    burstiness: float = 1.0  # gamma arrivals (--burstiness)
    duration_s: float | None = None  # --duration: each probe time-bounded
    warmup_s: float | None = None  # with a duration: each probe's steady-state trims (--warmup-seconds)
    cooldown_s: float | None = None  # (--cooldown-seconds)
    unit: str = "req/s"  # what a probed rate counts: req/s, or sessions/s for multi-turn sessions


class MaxRateProbe(_Closed):
    """One probed rate: the whole request list as Poisson arrivals at ``rate`` req/s."""

    rate: float
    slo_met: bool  # every SLO term held
    sustained: bool  # achieved at least half the offered rate
    slo_attainment: float | None  # share of requests within every limit
    ok: int
    requests: int
    failed: int
    req_s: float  # achieved
    output_tok_s: float
    goodput_req_s: float
    ttft_p95_ms: float | None
    tpot_p95_ms: float | None
    slo_checks: dict[str, SloCheck] = Field(default_factory=dict)
    met: bool  # slo_met and sustained: the rate counts as met


class MaxRateStart(_Closed):
    """One engine start's search. While it runs (or when interrupted) only its probes so far; once
    complete its answer: met at ``max_rate`` and missed at ``missed_at`` (None: met at every rate
    probed, up to ``highest_probed``), or met nowhere (``lowest_probed``, the ``closest`` probe)."""

    repeat: int  # 0-based engine start
    status: Literal["running", "interrupted", "complete"]
    met: bool | None = None
    max_rate: float | None = None
    missed_at: float | None = None
    lowest_probed: float | None = None  # met nowhere
    closest: MaxRateProbe | None = None  # met nowhere: the probe with the most requests within the SLO
    highest_probed: float | None = None  # met somewhere
    probes: list[MaxRateProbe] = Field(default_factory=list)


class MaxRateCI(_Closed):
    lo: float
    hi: float | None  # None: some start never missed, so the interval has no upper end
    means: str


class MaxRateSummary(_Closed):
    """The answer over every complete engine start."""

    n: int
    met_starts: int | None = None
    max_rates: list[float | None] = Field(default_factory=list)  # per start
    missed_at: list[float | None] = Field(default_factory=list)  # per start
    # met | none met | some starts met none | no finished search
    verdict: str
    max_rate: float | None = None  # met: the mean over starts; some met none: the lowest met
    bounded: bool | None = None  # met: every start also missed somewhere
    ci95: MaxRateCI | None = None  # met, with two starts or more


class MaxRate(_Closed):
    slo: list[SloLimit] = Field(default_factory=list)
    search: LoadSearchInfo
    repeats: list[MaxRateStart] = Field(default_factory=list)
    summary: MaxRateSummary | None = None  # once a start completed
