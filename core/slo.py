"""A service-level objective: latency limits a run, a tune or a gate is judged against.

    --slo ttft_p95=2s,tpot_p95=50ms      TTFT p95 <= 2000 ms and TPOT p95 <= 50 ms

One value, written one way everywhere: parsed from the CLI form, stored in run.json / tune.json as
``[{"metric", "stat", "limit_ms"}, ...]`` (the JSON form), read back from there, and evaluated
against a level (each term's statistic over the level's requests) and per request (goodput counts
the requests whose own values meet every limit).

Metric values are in milliseconds. Which metrics and statistics a term may name comes from the
metric registry (core/metrics.py); computing the values from request records is the analysis
layer's job (compare/analysis/metrics.py); this module only knows the limits and how to compare.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Protocol, Sequence

from core.errors import UserError
from core.metrics import BY_KEY, SLO_STATS, slo_metrics

METRICS = slo_metrics()  # ttft, tpot, itl, e2e
STATS = SLO_STATS
_UNIT_MS = {"s": 1e3, "ms": 1.0, "us": 1e-3, "ns": 1e-6}  # largest first: the written form prefers it
_EXAMPLE = "e.g. --slo ttft_p95=2s,tpot_p95=100ms"
_TERM = re.compile(r"\s*([a-z][a-z0-9]*)_([a-z0-9]+)\s*=\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)\s*")


class SLOError(UserError, ValueError):
    """An SLO that cannot be read: one line naming the bad term and the expected form."""


class _Summary(Protocol):
    def get(self, stat: str) -> Any: ...


def _allowed(metric: str, stat: str) -> bool:
    return metric in METRICS and stat in BY_KEY[metric].slo_stats


def _format_ms(limit_ms: float) -> str:
    """The shortest exact CLI spelling of a limit: 2000.0 -> '2s', 0.5 -> '500us'."""
    for unit, scale in _UNIT_MS.items():
        v = limit_ms / scale
        if v >= 1 and float(f"{v:g}") * scale == limit_ms:
            return f"{v:g}{unit}"
    return f"{limit_ms!r}ms"


def _statistic(values: Sequence[float], stat: str) -> float:
    if stat == "max":
        return float(max(values))
    if stat == "mean":
        return math.fsum(values) / len(values)
    # numpy's default percentile (linear interpolation), without numpy in the foundation layer
    s = sorted(values)
    pos = (len(s) - 1) * int(stat[1:]) / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return float(s[lo] + (s[hi] - s[lo]) * (pos - lo))


@dataclass(frozen=True)
class SLOTerm:
    """One limit: ``metric``'s ``stat`` (a percentile, mean or max) <= ``limit_ms``."""

    metric: str  # a registry metric with slo_stats: ttft | tpot | itl | e2e
    stat: str  # p50 | p90 | p95 | p99 | mean | max
    limit_ms: float

    def __post_init__(self) -> None:
        if not _allowed(self.metric, self.stat):
            raise SLOError(f"SLO term {self.metric}_{self.stat} is not METRIC_STAT=NUMBERUNIT; metrics "
                           f"{list(METRICS)}, stats {list(STATS)} ({_EXAMPLE})")
        if not (isinstance(self.limit_ms, (int, float)) and math.isfinite(self.limit_ms) and self.limit_ms >= 0):
            raise SLOError(f"SLO term {self.key}: limit {self.limit_ms!r} ms is not a finite number >= 0 "
                           f"({_EXAMPLE})")
        object.__setattr__(self, "limit_ms", float(self.limit_ms))

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"

    def __str__(self) -> str:
        return f"{self.key}={_format_ms(self.limit_ms)}"

    def as_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "stat": self.stat, "limit_ms": self.limit_ms}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SLOTerm":
        try:
            return cls(str(d["metric"]), str(d["stat"]), float(d["limit_ms"]))
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, SLOError):
                raise
            raise SLOError(f"SLO term {dict(d)!r} lacks metric/stat/limit_ms; the results were not "
                           f"written by this program (rewrite them with `compare run`)") from None

    def met_by(self, value_ms: float | None) -> bool:
        """Whether one value (already this term's statistic) is within the limit."""
        return value_ms is not None and not math.isnan(value_ms) and value_ms <= self.limit_ms

    def request_value(self, value_ms: float | Sequence[float] | None) -> float | None:
        """A request's own value for this term: a scalar as is; a series (its ITLs) reduced by the
        term's statistic, so ``itl_p99`` bounds each request's own p99 gap."""
        if value_ms is None or isinstance(value_ms, (int, float)):
            return value_ms
        return _statistic(value_ms, self.stat) if len(value_ms) else None


@dataclass(frozen=True)
class SLO:
    """All terms of one objective; empty (falsy) when none was given."""

    terms: tuple[SLOTerm, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple(self.terms))
        seen = set()
        for t in self.terms:
            if t.key in seen:
                raise SLOError(f"SLO term {t.key} is given twice; keep one limit per METRIC_STAT ({_EXAMPLE})")
            seen.add(t.key)

    # ---------------------------------------------------------------- forms

    @classmethod
    def parse(cls, text: str | None) -> "SLO":
        """``ttft_p95=2s,tpot_p95=100ms`` -> SLO; None or "" -> no SLO."""
        if not text or not text.strip():
            return cls()
        terms = []
        for part in text.split(","):
            m = _TERM.fullmatch(part)
            if not m or not _allowed(m.group(1), m.group(2)):
                raise SLOError(f"SLO term {part.strip()!r} is not METRIC_STAT=NUMBERUNIT; metrics "
                               f"{list(METRICS)}, stats {list(STATS)}, units ns/us/ms/s ({_EXAMPLE})")
            terms.append(SLOTerm(m.group(1), m.group(2), float(m.group(3)) * _UNIT_MS[m.group(4)]))
        return cls(tuple(terms))

    def __str__(self) -> str:
        return ",".join(str(t) for t in self.terms)

    def to_json(self) -> list[dict[str, Any]]:
        return [t.as_dict() for t in self.terms]

    @classmethod
    def from_json(cls, data: Sequence[Mapping[str, Any]] | None) -> "SLO":
        return cls(tuple(SLOTerm.from_dict(d) for d in data or ()))

    @classmethod
    def from_run(cls, run: Mapping[str, Any]) -> "SLO":
        """The SLO a run (run.json) or tune (tune.json) was measured under."""
        return cls.from_json(run.get("slo"))

    def describe(self) -> str:
        """For people: 'ttft_p95 <= 2000 ms, tpot_p95 <= 50 ms', or 'none'."""
        return ", ".join(f"{t.key} <= {t.limit_ms:g} ms" for t in self.terms) or "none"

    # ---------------------------------------------------------------- access

    def __bool__(self) -> bool:
        return bool(self.terms)

    def __iter__(self) -> Iterator[SLOTerm]:
        return iter(self.terms)

    def __len__(self) -> int:
        return len(self.terms)

    @property
    def metrics(self) -> frozenset[str]:
        return frozenset(t.metric for t in self.terms)

    @property
    def limits(self) -> dict[str, float]:
        """{"ttft_p95": 2000.0, ...}"""
        return {t.key: t.limit_ms for t in self.terms}

    # ---------------------------------------------------------------- evaluation

    def request_met(self, values_ms: Mapping[str, float | Sequence[float] | None]) -> bool:
        """Per request: each term's limit applied to this request's own value (ms; a metric the
        request has no value for, e.g. TPOT of a one-token answer, does not count against it)."""
        for t in self.terms:
            v = t.request_value(values_ms.get(t.metric))
            if v is not None and v > t.limit_ms:
                return False
        return True

    def check_level(self, summaries: Mapping[str, _Summary | None]) -> dict[str, dict[str, Any]]:
        """Per level: {key: {value_ms, limit_ms, met}} from each metric's summary (anything with
        ``get(stat)`` in ms); a metric without values (no request succeeded) is not met."""
        out = {}
        for t in self.terms:
            d = summaries.get(t.metric)
            v = float(d.get(t.stat)) if d else math.nan
            out[t.key] = {"value_ms": v, "limit_ms": t.limit_ms, "met": t.met_by(v)}
        return out
