"""Paired statistics between two backends/configs measured on the identical request list.

Why paired: every backend replays the same requests, so request-to-request variation (prompt
length, position in the schedule) cancels when the same requests are resampled for both sides.
Why repeats: one run says nothing about run-to-run noise (engine start, machine drift), so a
confidence interval needs at least ``MIN_REPEATS`` repeats per side; with fewer only the point
estimates are shown, and the result says so.

- Per-request metrics (TTFT/TPOT/E2E percentiles): two-level paired bootstrap. Each iteration
  resamples repeat pairs (repeat i of A with repeat i of B: interleaved runs share drift), then
  request ids (the same ids for A and B), and takes the percentile of the pooled values.
- Per-token metrics (ITL percentiles, over every token gap): the same paired bootstrap, each drawn
  request weighting its own gaps (compare/analysis/token_stats.py).
- Level-wide metrics (output tok/s, goodput): one value per repeat; paired log ratios. With fewer
  than ``BOOTSTRAP_MIN_PAIRS`` pairs a Student t interval (a bootstrap over 2-9 values covers far
  less than its nominal level), else a bootstrap over the pairs.
- Every metric gets a two-sided p value for "ratio == 1"; Holm's step-down correction is applied
  across the metrics of one comparison, so reporting many metrics does not manufacture winners.
- Equivalence (TOST) and non-inferiority against a relative margin use the (1 - 2 alpha)
  interval, the standard duality with two one-sided tests at level alpha.

All randomness is a seeded numpy Generator: the same inputs give the same intervals.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from compare.analysis.token_stats import TokenValues, boot_ratios
from core.metrics import ALWAYS, LEVEL, REGISTRY, REQUEST, TOKEN, WHEN_LIMITED, WITH_SLO, Metric
from core.records import RequestRecord
from core.results import BackendResult, LevelSummary, RunResults, as_run

MIN_REPEATS = 2
BOOTSTRAP_MIN_PAIRS = 10
DEFAULT_BOOT = 2000


@dataclass(frozen=True)
class MetricDef:
    """One tested quantity: a registry metric (core/metrics.py) at one statistic."""

    key: str
    label: str
    kind: str  # "request": percentile of per-request values | "token": of every token's | "level": one per repeat
    source: str  # the registry metric: per-request extractor, or the level summary key
    q: float | None  # percentile (request and token metrics)
    higher_is_better: bool
    unit: str


def _defs(m: Metric) -> list[MetricDef]:
    if m.kind == LEVEL:
        return [MetricDef(m.key, m.label, m.kind, m.key, None, m.higher_is_better, m.unit)]
    return [MetricDef(m.stat_key(st), f"{m.label} {st}", m.kind, m.key, int(st[1:]), m.higher_is_better, m.unit)
            for st in m.compare_stats]


METRICS: dict[str, MetricDef] = {d.key: d for m in REGISTRY for d in _defs(m)}


def _default_keys(m: Metric) -> tuple[str, ...]:
    return (m.key,) if m.kind == LEVEL else tuple(m.stat_key(st) for st in m.default_stats)


DEFAULT_METRICS = tuple(k for m in REGISTRY if m.compared == ALWAYS for k in _default_keys(m))
_EXTRACT = {m.key: m.extract_ns for m in REGISTRY if m.kind == REQUEST}


def default_metrics(run: RunResults | dict[str, Any]) -> tuple[str, ...]:
    """Those the registry compares always (TTFT, TPOT, throughput); those it compares where the SLO
    limits them (ITL, E2E: their default statistics and the SLO's own); goodput with an SLO. Every
    further metric widens the multiple-testing correction of the others."""
    slo = as_run(run).slo
    limited = [m for m in REGISTRY if m.compared == WHEN_LIMITED and any(t.metric == m.key for t in slo)]
    extra = [k for m in limited
             for k in dict.fromkeys([*_default_keys(m), *(m.stat_key(t.stat) for t in slo if t.metric == m.key)])
             if k in METRICS]
    with_slo = [k for m in REGISTRY if m.compared == WITH_SLO for k in _default_keys(m)] if slo else []
    return DEFAULT_METRICS + tuple(extra) + tuple(with_slo)


# ---------------------------------------------------------------- samples from results


@dataclass
class LevelSample:
    """One backend at one load level: per-request values per repeat, level values per repeat."""

    backend: str
    level: str
    request_ids: list[str]
    per_request: dict[str, np.ndarray] = field(default_factory=dict)  # source -> (repeats, n) ms
    per_repeat: dict[str, np.ndarray] = field(default_factory=dict)  # summary key -> (repeats,)
    per_token: dict[str, TokenValues] = field(default_factory=dict)  # source -> every token's value, ms
    repeats: list[int] = field(default_factory=list)

    @property
    def n_repeats(self) -> int:
        return len(self.repeats)

    def value(self, metric: str) -> float:
        """Point estimate over all repeats: percentile of the pooled requests / mean of levels."""
        m = METRICS[metric]
        if m.kind == "request":
            v = self.per_request[m.source].ravel()
            v = v[~np.isnan(v)]
            return float(np.percentile(v, m.q)) if v.size else math.nan
        if m.kind == "token":
            return self.per_token[m.source].pooled(m.q)
        v = self.per_repeat.get(m.source)
        return float(np.mean(v)) if v is not None and v.size else math.nan


def repeat_summaries(entry: BackendResult) -> list[tuple[int, dict[str, LevelSummary]]]:
    """(repeat number, {level: summary}) of one backend; runs without repeats are one repeat."""
    return entry.repeat_summaries()


def collect(run: RunResults | dict[str, Any], records: Iterable[RequestRecord]
            ) -> dict[tuple[str, str], LevelSample]:
    """Arrange a results directory's data for the tests: keyed by (backend, level)."""
    run = as_run(run)
    by_cell: dict[tuple[str, str, int], dict[str, RequestRecord]] = {}
    ids: set[str] = set()
    for r in records:
        if r.trimmed is not None:  # outside a time-bounded level's steady state (compare/analysis/steady.py)
            continue
        by_cell.setdefault((r.backend, r.level, r.repeat), {})[r.request_id] = r
        ids.add(r.request_id)
    order = sorted(ids)
    col = {rid: i for i, rid in enumerate(order)}
    out: dict[tuple[str, str], LevelSample] = {}
    for name, entry in run.backends.items():
        reps = entry.repeat_summaries()
        labels = {lb for _, lv in reps for lb in lv}
        for label in labels:
            usable = [(k, lv[label]) for k, lv in reps
                      if label in lv and not lv[label].aborted]
            if not usable:
                continue
            s = LevelSample(name, label, order, repeats=[k for k, _ in usable])
            for src, fn in _EXTRACT.items():
                arr = np.full((len(usable), len(order)), np.nan)
                for i, (k, _) in enumerate(usable):
                    for rid, rec in by_cell.get((name, label, k), {}).items():
                        v = fn(rec) if rec.ok else None
                        if v is not None:
                            arr[i, col[rid]] = v / 1e6
                s.per_request[src] = arr
            for m in REGISTRY:
                if m.kind == TOKEN and m.extract_ns is not None:
                    fn_ = m.extract_ns
                    s.per_token[m.key] = TokenValues.of([
                        {col[rid]: [v / 1e6 for v in fn_(rec)] for rid, rec in by_cell.get((name, label, k), {}).items()
                         if rec.ok} for k, _ in usable])
            for key in (*(m.key for m in REGISTRY if m.kind == LEVEL), "req_s"):
                vals = [getattr(summ, key) for _, summ in usable]
                if all(isinstance(v, (int, float)) for v in vals):
                    s.per_repeat[key] = np.asarray(vals, dtype=float)
            out[(name, label)] = s
    return out


# ---------------------------------------------------------------- comparisons


@dataclass
class Comparison:
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    a: str
    b: str
    level: str
    a_value: float
    b_value: float
    ratio: float  # b / a
    n_pairs: int
    ci: tuple[float, float] | None = None  # of the ratio, at ``confidence``
    ci90: tuple[float, float] | None = None  # (1 - 2 alpha) interval, for TOST / non-inferiority
    p_value: float | None = None
    p_holm: float | None = None
    significant: bool = False
    method: str = ""
    note: str = ""
    margin: float | None = None
    equivalent: bool | None = None
    noninferior: bool | None = None  # is B no worse than A by more than the margin

    @property
    def b_better(self) -> bool:
        return (self.ratio > 1) == self.higher_is_better and self.ratio != 1

    @property
    def winner(self) -> str | None:
        if not self.significant:
            return None
        return self.b if self.b_better else self.a

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["winner"] = self.winner
        return _finite(d)


def _finite(obj: Any) -> Any:
    """NaN/inf -> None so the JSON stays valid for every reader."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def compare_levels(a: LevelSample, b: LevelSample, metrics: Sequence[str] = DEFAULT_METRICS, *,
                   confidence: float = 0.95, margin: float | None = None, n_boot: int = DEFAULT_BOOT,
                   seed: int = 0) -> list[Comparison]:
    """B relative to A for each metric, Holm-corrected across ``metrics``."""
    alpha = 1.0 - confidence
    out = []
    for i, key in enumerate(metrics):
        m = METRICS[key]
        if m.kind == "level" and (m.source not in a.per_repeat or m.source not in b.per_repeat):
            continue
        av, bv = a.value(key), b.value(key)
        c = Comparison(key, m.label, m.unit, m.higher_is_better, a.backend, b.backend, a.level,
                       av, bv, bv / av if av and math.isfinite(av) and math.isfinite(bv) else math.nan,
                       n_pairs=min(a.n_repeats, b.n_repeats), margin=margin)
        rng = np.random.default_rng([seed, i])
        if not math.isfinite(c.ratio) or c.ratio <= 0:
            c.note = "no ratio: a value is missing or zero"
        elif c.n_pairs < MIN_REPEATS:
            c.note = f"{c.n_pairs} repeat(s): too few for a confidence interval (use --repeats >= {MIN_REPEATS}); point estimate only"
        elif m.kind == "request":
            k = c.n_pairs
            samples = _boot_request(a.per_request[m.source][:k], b.per_request[m.source][:k], m.q, rng, n_boot)
            _from_samples(c, samples, alpha, "paired bootstrap (repeats x requests)")
        elif m.kind == "token":
            k = c.n_pairs
            samples = boot_ratios(a.per_token[m.source], b.per_token[m.source], k, len(a.request_ids), m.q, rng,
                                  n_boot)
            _from_samples(c, samples, alpha, "paired bootstrap (repeats x requests, each request's gaps)")
        else:
            d = np.log(b.per_repeat[m.source][: c.n_pairs] / a.per_repeat[m.source][: c.n_pairs])
            if not np.all(np.isfinite(d)):
                c.note = "no interval: a repeat has a zero value"
            elif d.size >= BOOTSTRAP_MIN_PAIRS:
                boot = rng.choice(d, size=(n_boot, d.size), replace=True).mean(axis=1)
                _from_samples(c, np.exp(boot), alpha, "paired bootstrap over repeats")
            else:
                _t_interval(c, d, alpha)
        out.append(c)
    _holm_mark(out, alpha)
    return out


def _boot_request(A: np.ndarray, B: np.ndarray, q: float, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    k, n = A.shape
    ratios = np.empty(n_boot)
    chunk = max(1, int(2e6 // max(1, k * n)))
    for s in range(0, n_boot, chunk):
        m = min(chunk, n_boot - s)
        R = rng.integers(0, k, size=(m, k))[:, :, None]
        Q = rng.integers(0, n, size=(m, n))[:, None, :]
        qa = _nanpct(A[R, Q].reshape(m, -1), q)
        qb = _nanpct(B[R, Q].reshape(m, -1), q)
        ratios[s:s + m] = qb / qa
    return ratios[np.isfinite(ratios)]


def _nanpct(x: np.ndarray, q: float) -> np.ndarray:
    ok = ~np.isnan(x)
    if ok.all():
        return np.percentile(x, q, axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-failed resample -> NaN, dropped later
        return np.nanpercentile(x, q, axis=1)


def _from_samples(c: Comparison, ratios: np.ndarray, alpha: float, method: str) -> None:
    if ratios.size < 10:
        c.note = "no interval: too few valid bootstrap resamples (most requests failed?)"
        return
    c.method = method
    c.ci = tuple(float(x) for x in np.quantile(ratios, [alpha / 2, 1 - alpha / 2]))  # type: ignore[assignment]
    c.ci90 = tuple(float(x) for x in np.quantile(ratios, [alpha, 1 - alpha]))  # type: ignore[assignment]
    tail = min(np.mean(ratios <= 1.0), np.mean(ratios >= 1.0))
    c.p_value = float(min(1.0, max(2 * tail, 1.0 / ratios.size)))
    _margins(c)


def t_ppf(p: float, df: int) -> float:
    from scipy.special import stdtrit  # scipy.special: scipy.stats takes seconds to import

    return float(stdtrit(df, p))


def _t_interval(c: Comparison, d: np.ndarray, alpha: float) -> None:
    from scipy.special import stdtr

    k = d.size
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(k)
    c.method = f"paired t over {k} repeats (log ratio)"
    if se == 0:
        c.ci = c.ci90 = (math.exp(mean), math.exp(mean))
        c.p_value = 1.0 if mean == 0 else 0.0
    else:
        t2, t1 = t_ppf(1 - alpha / 2, k - 1), t_ppf(1 - alpha, k - 1)
        c.ci = (math.exp(mean - t2 * se), math.exp(mean + t2 * se))
        c.ci90 = (math.exp(mean - t1 * se), math.exp(mean + t1 * se))
        c.p_value = float(2 * stdtr(k - 1, -abs(mean / se)))
    _margins(c)


def _margins(c: Comparison) -> None:
    """Equivalence / non-inferiority of B vs A within a relative margin (TOST duality)."""
    if c.margin is None or c.ci90 is None:
        return
    lo, hi = c.ci90
    # "worse" factor: > 1 means B is worse, whatever the metric's direction
    w_lo, w_hi = (1 / hi, 1 / lo) if c.higher_is_better else (lo, hi)
    c.noninferior = w_hi < 1 + c.margin
    c.equivalent = w_hi < 1 + c.margin and w_lo > 1 / (1 + c.margin)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p values (same order as given)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p)
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return [float(x) for x in out]


def _holm_mark(comps: list[Comparison], alpha: float) -> None:
    tested = [c for c in comps if c.p_value is not None]
    for c, p in zip(tested, holm([c.p_value for c in tested])):  # type: ignore[misc]
        c.p_holm = p
        c.significant = p < alpha


# ---------------------------------------------------------------- one sample (report bars)


def single_ci(s: LevelSample, metric: str, confidence: float = 0.95, n_boot: int = 1000,
              seed: int = 0) -> tuple[float, float] | None:
    """CI of one backend's metric (not a difference): for error bars. None below MIN_REPEATS."""
    m = METRICS[metric]
    if s.n_repeats < MIN_REPEATS:
        return None
    alpha = 1 - confidence
    rng = np.random.default_rng(seed)
    if m.kind == "request":
        A = s.per_request[m.source]
        k, n = A.shape
        R = rng.integers(0, k, size=(n_boot, k))[:, :, None]
        Q = rng.integers(0, n, size=(n_boot, n))[:, None, :]
        v = _nanpct(A[R, Q].reshape(n_boot, -1), m.q)
        v = v[np.isfinite(v)]
        return (float(np.quantile(v, alpha / 2)), float(np.quantile(v, 1 - alpha / 2))) if v.size else None
    vals = s.per_repeat.get(m.source)
    if vals is None or vals.size < MIN_REPEATS:
        return None
    half = t_ppf(1 - alpha / 2, vals.size - 1) * vals.std(ddof=1) / math.sqrt(vals.size)
    return (float(vals.mean() - half), float(vals.mean() + half))
