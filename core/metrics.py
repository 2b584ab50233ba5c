"""The metric registry: every metric the tool measures, compares, limits, gates and shows, defined
once. Statistics (compare/analysis/stats.py), the SLO (core/slo.py), the verdict and the gate, the
level summary, length matching, the console table, the report and its plots all iterate over
``REGISTRY`` instead of naming metrics themselves, so a metric added here reaches every one of them
(tests/core/test_metric_registry.py checks that each consumer covers each metric).

Per-request extractors (client-side, from perf_counter_ns stamps):
- TTFT: first event carrying a token - send time.
- ITL: gap between consecutive events, attributed to the first token of the later event; the
  other tokens of a multi-token event get an ITL of 0 (they arrived together). So
  sum(ITL) == last token time - first token time, and an engine that batches tokens into one
  event is not credited with impossibly small per-token gaps on average.
- TPOT: (last token time - first token time) / (output tokens - 1), per request.
- E2E: end of stream - send time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from core.records import RequestRecord

REQUEST, TOKEN, LEVEL = "request", "token", "level"
# when a metric is among the comparisons a verdict or a gate makes by default
ALWAYS, WHEN_LIMITED, WITH_SLO, NEVER = "always", "when limited", "with an SLO", "never"
# statistics an SLO term may limit (any latency metric)
SLO_STATS = ("p50", "p90", "p95", "p99", "mean", "max")


def ttft_ns(r: RequestRecord) -> int | None:
    return r.event_times_ns[0] - r.t_sent_ns if r.event_times_ns else None


def e2e_ns(r: RequestRecord) -> int | None:
    return (r.t_end_ns - r.t_sent_ns) if r.t_end_ns is not None and r.ok else None


def itls_ns(r: RequestRecord) -> list[int]:
    out: list[int] = []
    times, counts = r.event_times_ns, r.event_token_counts
    # tokens after the very first one of the stream
    if counts and counts[0] > 1:
        out.extend([0] * (counts[0] - 1))
    for i in range(1, len(times)):
        out.append(times[i] - times[i - 1])
        out.extend([0] * (counts[i] - 1))
    return out


def tpot_ns(r: RequestRecord) -> float | None:
    n = sum(r.event_token_counts)
    if n < 2 or not r.event_times_ns:
        return None
    return (r.event_times_ns[-1] - r.event_times_ns[0]) / (n - 1)


@dataclass(frozen=True)
class Metric:
    """One metric and everything every consumer needs to know about it.

    kind: ``request`` (one value per request; statistics over requests), ``token`` (a series per
    request, one value per output token; statistics over every token) or ``level`` (one value per
    load level and repeat, taken from the level summary under ``key``).
    """

    key: str  # ttft | tpot | itl | e2e | output_tok_s | goodput_req_s
    label: str  # for people: "TTFT", "output tok/s"
    unit: str
    higher_is_better: bool
    kind: str  # REQUEST | TOKEN | LEVEL
    extract_ns: Callable[[RequestRecord], Any] | None = None  # request: ns or None; token: list of ns
    compare_stats: tuple[str, ...] = ()  # percentiles a comparison or gate may test
    default_stats: tuple[str, ...] = ()  # those tested by default (when ``compared`` says so)
    compared: str = ALWAYS  # ALWAYS | WHEN_LIMITED (an SLO term names it) | WITH_SLO (any SLO) | NEVER
    slo_stats: tuple[str, ...] = ()  # statistics an SLO may limit; () = no SLO term for it
    table_stats: tuple[str, ...] = ()  # columns of the results tables (console, report)
    narrow_stats: tuple[str, ...] = ()  # the columns kept on a narrow terminal
    plotted: bool = False  # an axis of latency vs throughput / a bar of the per-backend bars
    cut_by_length_match: bool = True  # changes when outputs are cut at k tokens (TTFT does not)
    headline: str = ""  # a plotted latency metric's line of the answer without an SLO: "First token"

    @property
    def summary_key(self) -> str:
        """Its entry in a level summary: the distribution (ms) or the level value."""
        return self.key if self.kind == LEVEL else f"{self.key}_ms"

    def stat_key(self, stat: str | None = None) -> str:
        """``ttft_p95``; a level metric is its own key."""
        return self.key if self.kind == LEVEL or stat is None else f"{self.key}_{stat}"

    def request_ms(self, r: RequestRecord) -> float | list[float] | None:
        """A request's own value in ms (a token metric: the series; an SLO term reduces it)."""
        if self.extract_ns is None:
            return None
        v = self.extract_ns(r)
        if self.kind == TOKEN:
            return [x / 1e6 for x in v]
        return None if v is None else v / 1e6


REGISTRY: tuple[Metric, ...] = (
    Metric("ttft", "TTFT", "ms", False, REQUEST, ttft_ns, compare_stats=("p50", "p95"),
           default_stats=("p50", "p95"), slo_stats=SLO_STATS, table_stats=("p50", "p95"),
           narrow_stats=("p50", "p95"), plotted=True, cut_by_length_match=False, headline="First token"),
    Metric("tpot", "TPOT", "ms", False, REQUEST, tpot_ns, compare_stats=("p50", "p95"),
           default_stats=("p50", "p95"), slo_stats=SLO_STATS, table_stats=("p50", "p95"),
           narrow_stats=("p50",), plotted=True, headline="Per output token"),
    # ITL is compared only where the SLO limits it: TPOT is already each request's mean gap, and
    # every further metric widens the multiple-testing correction of the others
    Metric("itl", "ITL", "ms", False, TOKEN, itls_ns, compare_stats=("p50", "p95", "p99"),
           default_stats=("p50", "p95"), compared=WHEN_LIMITED, slo_stats=SLO_STATS, table_stats=("p99",)),
    Metric("e2e", "E2E", "ms", False, REQUEST, e2e_ns, compare_stats=("p95",), default_stats=("p95",),
           compared=WHEN_LIMITED, slo_stats=SLO_STATS, table_stats=("p95",), narrow_stats=("p95",)),
    Metric("output_tok_s", "output tok/s", "tok/s", True, LEVEL, plotted=True),
    Metric("goodput_req_s", "goodput req/s", "req/s", True, LEVEL, compared=WITH_SLO),
)
BY_KEY: Mapping[str, Metric] = {m.key: m for m in REGISTRY}


def latency() -> Iterator[Metric]:
    """The per-request and per-token metrics (those with a distribution in ms)."""
    return (m for m in REGISTRY if m.kind != LEVEL)


def slo_metrics() -> tuple[str, ...]:
    """The metric names an SLO term may name."""
    return tuple(m.key for m in REGISTRY if m.slo_stats)


def get(key: str) -> Metric:
    return BY_KEY[key]
