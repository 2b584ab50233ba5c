"""``compare run --find-max-rate``: the highest Poisson request rate each backend can take and
still meet the SLO, searched in the engine the run already started (after its fixed levels).

The search is the tuning probe's (compare/tuning/probe.py): bracket by doubling/halving from a
start rate, then bisect geometrically, on the run's own request list and arrival seed. Its answer
for one engine start is an interval: the highest probed rate that met the SLO (and kept up with
the offered rate) and the lowest probed rate above it that did not. The true limit of that engine
start lies between the two; only the probe budget decides how close they are.

With ``--repeats N`` (N fresh engine starts) each start gives its own interval. The reported
interval for the mean limit is the Student-t 95% lower bound of the met rates to the Student-t
95% upper bound of the missed rates: it covers engine-to-engine noise *and* the probe resolution
(a t-interval over the met rates alone would be falsely narrow: identical request lists and seeds
probe the same rates each time, so the met rates often agree exactly). It has no upper end when
some start met the SLO at every rate it probed, and is not given when some start met it at none.

run.json: ``backends[NAME].max_rate``, core/results/max_rate.py ``MaxRate``: slo, search, repeats (one
per engine start: status, met, max_rate, missed_at, probes) and summary.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Awaitable, Callable

from backends.base import Backend
from core.slo import SLO
from compare.tuning.probe import LoadSearch, ProbeHooks, max_load_under_slo, mean_ci
from core.results.evolve import evolve
from core.results.max_rate import LoadSearchInfo, MaxRate, MaxRateCI, MaxRateProbe, MaxRateStart, MaxRateSummary
from core.results.slo import SloLimit

PROBE_KEYS = ("slo_met", "sustained", "slo_attainment", "ok", "requests", "failed", "req_s", "output_tok_s",
              "goodput_req_s", "ttft_p95_ms", "tpot_p95_ms", "slo_checks")

Hook = Callable[..., Awaitable[None]]


def _probe_row(p: dict[str, Any]) -> MaxRateProbe:
    """A probe of compare/tuning/probe.py (``compact`` plus whether it held) as run.json keeps it;
    ``met``: SLO met and the engine kept up with the offered rate."""
    return MaxRateProbe(rate=round(float(p["load"]), 4), **{k: p.get(k) for k in PROBE_KEYS}, met=bool(p["held"]))


def one_start(rep: int, result: dict[str, Any], probes: list[dict[str, Any]]) -> MaxRateStart:
    """One engine start's answer from ``max_load_under_slo``'s result."""
    rows = [_probe_row(p) for p in probes]
    if not result.get("feasible"):
        closest = result.get("closest")
        return MaxRateStart(repeat=rep, status="complete", met=False, max_rate=None, missed_at=result["bracket"][1],
                            lowest_probed=min(r.rate for r in rows) if rows else None,
                            closest=_probe_row(closest) if closest else None, probes=rows)
    lo, hi = result["bracket"]
    return MaxRateStart(repeat=rep, status="complete", met=True, max_rate=round(float(lo), 4),
                        missed_at=None if hi is None else round(float(hi), 4),
                        highest_probed=max(r.rate for r in rows), probes=rows)


def summarize_starts(starts: list[MaxRateStart]) -> MaxRateSummary:
    """The answer over every finished engine start (see the module docstring for the interval)."""
    done = [s for s in starts if s.status == "complete"]
    n = len(done)
    if not n:
        return MaxRateSummary(n=0, verdict="no finished search")
    met = [s for s in done if s.met]
    common: dict[str, Any] = {"n": n, "met_starts": len(met), "max_rates": [s.max_rate for s in done],
                              "missed_at": [s.missed_at for s in done]}
    if len(met) < n:
        return MaxRateSummary(**common, verdict="none met" if not met else "some starts met none",
                              max_rate=None if not met else min(s.max_rate for s in met if s.max_rate is not None))
    lows = [float(s.max_rate or 0.0) for s in met]
    highs = [s.missed_at for s in met]
    bounded = all(h is not None for h in highs)  # every start also missed it somewhere
    ci = None
    if n >= 2:
        ci = MaxRateCI(lo=mean_ci(lows, floor=0.0)["lo"],
                       hi=mean_ci([float(h) for h in highs if h is not None])["hi"] if bounded else None,
                       means="Student-t 95% lower bound of the met rates to upper bound of the "
                             "missed rates, over the engine starts")
    return MaxRateSummary(**common, max_rate=sum(lows) / n, bounded=bounded,
                          **({"ci95": ci} if ci is not None else {}), verdict="met")


def make_hook(slo: SLO, search: LoadSearch) -> Hook:
    """The runner's ``after_levels`` step: search, keep every probe in the backend's entry as it
    happens (an interrupted search keeps what it probed), then update the summary."""
    base = replace(search, kind="rate", repeats=1, warmup=0)  # the run warmed the engine up

    async def after_levels(cfg: Any, name: str, backend: Backend, entry: Any, rep: int,
                           progress: Any) -> None:
        """``entry``: the backend's section in the writer (compare/running/entry.py BackendEntry)."""
        from compare.workload.sessions import is_sessions

        # multi-turn sessions: a probe's rate starts sessions, and every line says so
        search = replace(base, seed=cfg.workload.seed,
                         unit="sessions/s" if is_sessions(cfg.requests) else base.unit)
        section = entry.entry.max_rate or MaxRate(slo=[SloLimit(**t) for t in slo.to_json()],
                                                  search=LoadSearchInfo(**search.as_dict()), repeats=[])
        before = list(section.repeats)
        probes: list[dict[str, Any]] = []

        def keep(this: MaxRateStart, summary: MaxRateSummary | None = None) -> None:
            """This start's row (and the summary) into the writer's section: what an interrupted
            search probed stays in run.json."""
            nonlocal section
            section = evolve(section, repeats=[*before, this], **({"summary": summary} if summary else {}))
            entry.update(max_rate=section)

        def running() -> MaxRateStart:
            return MaxRateStart(repeat=rep, status="running", probes=[_probe_row(p) for p in probes])

        def on_probe(p: dict[str, Any]) -> None:
            probes.append(p)
            keep(running())
            progress.note(name, probe_line(name, _probe_row(p), search.unit))

        keep(running())
        hooks = ProbeHooks(level_start=lambda lv, n: progress.level_start(name, lv, n),
                           record=progress.request_done, probe=on_probe)
        progress.phase(name, "max-rate search")
        try:
            result = await max_load_under_slo(backend, cfg.requests, slo, search, hooks)
        except BaseException:
            keep(MaxRateStart(repeat=rep, status="interrupted", probes=running().probes))
            raise
        this = one_start(rep, result, probes)
        keep(this, summarize_starts([*before, this]))

    return after_levels


# ---------------------------------------------------------------- words


def fmt_rate(r: float | None) -> str:
    if r is None:
        return "-"
    if math.isinf(r):
        return "inf"
    return f"{r:.3g}" if r < 100 else f"{r:.0f}"


def probe_line(name: str, p: MaxRateProbe, unit: str = "req/s") -> str:
    """``  vllm max-rate r4: met (100% within SLO, 3.9 req/s achieved)``; sessions: ``r2 sessions/s``
    with the turns/s achieved."""
    what = "met" if p.met else "fell behind" if p.slo_met else "missed"
    rate = f"r{fmt_rate(p.rate)}" + ("" if unit == "req/s" else f" {unit}")
    done = "req/s" if unit == "req/s" else "turns/s"
    return (f"  {name} max-rate {rate}: {what} ({p.slo_attainment or 0:.0%} within SLO, "
            f"{p.req_s:.2f} {done} achieved)")


def answer_line(name: str, section: MaxRate) -> str:
    """One line per backend, e.g. ``vllm  max rate meeting SLO: 6.2 req/s (met at 6.2, missed at 7.8)``."""
    starts = [s for s in section.repeats if s.status == "complete"]
    s = section.summary or summarize_starts(starts)
    u = section.search.unit  # req/s, or sessions/s for multi-turn sessions
    head = f"{name}  max rate meeting SLO:"
    if not starts:
        return f"{head} no finished search"
    if s.verdict == "none met":
        low = min(x.missed_at for x in starts if x.missed_at is not None)
        close = [x.closest for x in starts if x.closest]
        best = max(close, key=lambda p: p.slo_attainment or 0) if close else None
        near = (f"; closest at {fmt_rate(best.rate)} {u}: {best.slo_attainment or 0:.0%} of requests "
                f"within it") if best else ""
        return f"{head} none met (missed at every rate probed, down to {fmt_rate(low)} {u}{near})"
    if s.verdict == "some starts met none":
        per = ", ".join("none" if x.max_rate is None else fmt_rate(x.max_rate) for x in starts)
        return f"{head} not every engine start met it (per start: {per} {u}); no interval"
    if len(starts) == 1:
        x = starts[0]
        if x.missed_at is None:
            return (f"{head} >= {fmt_rate(x.max_rate)} {u} (met at every rate probed, up to "
                    f"{fmt_rate(x.highest_probed)}; more --max-rate-probes or a higher --max-rate-start "
                    f"find the limit)")
        return f"{head} {fmt_rate(x.max_rate)} {u} (met at {fmt_rate(x.max_rate)}, missed at {fmt_rate(x.missed_at)})"
    met = ", ".join(fmt_rate(x.max_rate) for x in starts)
    missed = ", ".join("never" if x.missed_at is None else fmt_rate(x.missed_at) for x in starts)
    lo, hi = (s.ci95.lo, s.ci95.hi) if s.ci95 else (None, None)
    bound = (f"95% CI {fmt_rate(lo)}-{fmt_rate(hi)}" if hi is not None
             else f"95% CI from {fmt_rate(lo)}, no upper end: some start never missed it")
    ge = "" if s.bounded else ">= "
    return (f"{head} {ge}{fmt_rate(s.max_rate)} {u} (mean of {len(starts)} engine starts; met at {met}, "
            f"missed at {missed}; {bound})")
