"""Goodput of one started engine under an SLO: a bracketing search on the load.

Goodput here is the highest load (Poisson request rate, or closed-loop concurrency) at which the
SLO still holds, not the goodput at one fixed load: a config that wins at 2 req/s may lose at 8.

Search (all levels send the same request list; open loop uses the workload seed's arrivals):
1. bracket: start at ``start``; while the SLO holds, double; while it fails, halve. This ends
   with ``lo`` (held) and ``hi`` (failed) one factor of 2 apart, or at a limit.
2. bisect: geometric midpoint (integer midpoint for concurrency) until hi/lo <= 1 + tol.
   A rate level only counts as held if the engine also kept up with it (achieved req/s >= half
   the offered rate): with a finite request list an overloaded engine can still meet a latency
   SLO because its queue never grows long enough; with more requests it would not.
3. repeat: measure ``lo`` again ``repeats - 1`` times with other arrival seeds; the goodput CI
   is the Student-t 95% interval over those repeats (run-to-run noise, not only the bracket).
Every probe is kept: the Pareto frontier is drawn from all probes of all trials.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable

from core.records import GenerationRequest
from backends.base import Backend
from compare.running.executor import run_level, run_one
from compare.analysis.metrics import summarize
from compare.analysis.steady import Trim, measured_ns
from core.results import LevelSummary
from core.slo import SLO
from compare.workload.duration import time_bounded
from compare.workload.schedule import LoadLevel
from core.records import RequestRecord


KEEP_UP = 0.5  # achieved/offered request rate below which a rate level counts as overloaded


@dataclass(frozen=True)
class LoadSearch:
    kind: str = "rate"  # "rate" (req/s, Poisson) | "concurrency"
    start: float = 1.0
    tol: float = 0.15  # stop bisecting when hi/lo <= 1 + tol
    max_probes: int = 8  # bracketing + bisection levels (repeats come on top)
    repeats: int = 2  # measurements at the final load (>= 2 gives a CI)
    # lowest load tried: start/8 by default (a probe at rate r lasts ~N/r s, so very low rates
    # cost minutes each and say nothing new: the SLO is then unreachable for this config)
    min_load: float | None = None
    max_load: float = 1024.0
    warmup: int = 2
    timeout_s: float = 120.0
    seed: int = 0
    # rate searches: the probes' arrival process and, with a duration, time-bounded probes
    # (compare/workload/duration.py) so a rate the engine cannot keep up with builds a queue
    arrival: str = "poisson"
    burstiness: float = 1.0
    duration_s: float | None = None
    warmup_s: float | None = None  # with a duration: the probes' steady-state trims (compare/analysis/steady.py)
    cooldown_s: float | None = None
    unit: str = "req/s"  # what a rate counts: requests, or sessions started (multi-turn sessions)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def compact(level: LoadLevel, s: LevelSummary) -> dict[str, Any]:
    """The few numbers of a probe the tuner and the Pareto plot need."""
    checks = {k: c.model_dump() for k, c in (s.slo_checks or {}).items()}
    return {"load": level.value, "slo_met": bool(s.slo_met), "ok": s.ok,
            "requests": s.requests, "failed": s.failed, "output_tok_s": s.output_tok_s,
            "req_s": s.req_s, "goodput_req_s": s.goodput_req_s if s.goodput_req_s is not None else 0.0,
            "slo_attainment": s.slo_attainment if s.slo_attainment is not None else 0.0,
            "ttft_p95_ms": s.ttft_ms.p95 if s.ttft_ms else None,
            "tpot_p95_ms": s.tpot_ms.p95 if s.tpot_ms else None, "slo_checks": checks}


@dataclass(frozen=True)
class ProbeHooks:
    """Optional callbacks of a caller that shows or keeps the search live (``compare run``)."""

    level_start: Callable[[LoadLevel, int], None] | None = None  # (level, requests) before a probe
    record: Callable[[RequestRecord], None] | None = None  # each finished request of a probe
    probe: Callable[[dict[str, Any]], None] | None = None  # each probe's compact summary


class _Prober:
    def __init__(self, backend: Backend, requests: list[GenerationRequest], slo: SLO,
                 search: LoadSearch, hooks: ProbeHooks | None = None) -> None:
        self.backend, self.requests, self.slo, self.search = backend, requests, slo, search
        self.hooks = hooks or ProbeHooks()
        self.probes: list[dict[str, Any]] = []

    def level(self, value: float, seed_offset: int = 0) -> LoadLevel:
        if self.search.kind == "concurrency":
            value = max(1, int(round(value)))
        if self.search.kind == "concurrency":
            return LoadLevel("concurrency", value)
        lv = LoadLevel("rate", value, arrival=self.search.arrival, burstiness=self.search.burstiness)
        return time_bounded(lv, self.search.duration_s, len(self.requests), self.search.seed + seed_offset,
                            self.search.warmup_s, self.search.cooldown_s)

    async def probe(self, value: float, seed_offset: int = 0) -> dict[str, Any]:
        lv = self.level(value, seed_offset)
        if self.hooks.level_start:
            self.hooks.level_start(lv, len(self.requests))
        from compare.running.sessions import run_session_level
        from compare.workload.sessions import group_sessions, is_sessions

        send = run_session_level if is_sessions(self.requests) else run_level  # multi-turn: turns in order
        out = await send(self.backend, lv.take(self.requests), lv, seed=self.search.seed + seed_offset,
                              timeout_s=self.search.timeout_s, max_errors=len(self.requests),
                              on_record=self.hooks.record)
        # a time-bounded probe is judged on its steady state, like a --duration level
        trim = Trim(lv, lv.take(self.requests), self.search.seed + seed_offset)
        p = compact(lv, summarize([trim(r) for r in out.records], measured_ns(out), self.slo))
        p["seed_offset"] = seed_offset
        # kept up: achieved vs offered requests/s; a session rate offers its turns (each session's
        # turns, on average, per session started)
        per = len(lv.take(self.requests)) / max(1, len(group_sessions(lv.take(self.requests)))) \
            if is_sessions(self.requests) else 1.0
        p["sustained"] = lv.kind == "concurrency" or p["req_s"] >= KEEP_UP * lv.value * per
        p["held"] = p["slo_met"] and p["sustained"]
        self.probes.append(p)
        if self.hooks.probe:
            self.hooks.probe(p)
        return p

    def _step_down(self, v: float) -> float:
        return v / 2 if self.search.kind == "rate" else max(1, int(v) // 2)


def _close_enough(lo: float, hi: float, s: LoadSearch) -> bool:
    if s.kind == "concurrency":
        return hi - lo <= 1
    return hi / lo <= 1 + s.tol


def _mid(lo: float, hi: float, s: LoadSearch) -> float:
    return (lo + hi) // 2 if s.kind == "concurrency" else math.sqrt(lo * hi)


async def max_load_under_slo(backend: Backend, requests: list[GenerationRequest],
                             slo: SLO, search: LoadSearch, hooks: ProbeHooks | None = None) -> dict[str, Any]:
    """Bracket, bisect, repeat. Returns goodput (the max load that held), its CI and all probes."""
    pr = _Prober(backend, requests, slo, search, hooks)
    for r in requests[: search.warmup]:
        warm = GenerationRequest(request_id=f"warmup-{r.request_id}", max_tokens=min(r.max_tokens, 8),
                                 prompt_token_ids=r.prompt_token_ids, prompt_text=r.prompt_text,
                                 messages=r.messages, ignore_eos=r.ignore_eos)
        await run_one(backend, warm, "warmup", search.timeout_s)
    start = pr.level(search.start).value
    lo: float | None = None
    hi: float | None = None
    v = start
    first = await pr.probe(v)
    if first["held"]:
        lo = v
        while len(pr.probes) < search.max_probes and v * 2 <= search.max_load:
            v = v * 2
            if (await pr.probe(v))["held"]:
                lo = v
            else:
                hi = v
                break
    else:
        hi = v
        while len(pr.probes) < search.max_probes:
            nv = pr._step_down(v)
            if nv < (search.min_load or start / 8) or nv == v:
                break
            v = nv
            if (await pr.probe(v))["held"]:
                lo = v
                break
            hi = v
    while lo is not None and hi is not None and not _close_enough(lo, hi, search) \
            and len(pr.probes) < search.max_probes:
        m = _mid(lo, hi, search)
        if (await pr.probe(m))["held"]:
            lo = m
        else:
            hi = m
    if lo is None:
        closest = max(pr.probes, key=lambda p: (p["slo_attainment"], -p["load"]))
        return {"feasible": False, "goodput": 0.0, "bracket": [0.0, hi], "probes": pr.probes,
                "reason": "the SLO failed even at the lowest load tried",
                "closest": closest, "repeats": []}
    reps = [p for p in pr.probes if p["load"] == pr.level(lo).value and p["held"]][-1:]
    for k in range(1, search.repeats):
        reps.append(await pr.probe(lo, seed_offset=k))
    held = sum(1 for p in reps if p["held"])
    values = [p["goodput_req_s"] for p in reps]
    return {"feasible": True, "goodput": pr.level(lo).value, "bracket": [pr.level(lo).value, hi],
            "goodput_req_s": mean_ci(values, floor=0.0), "slo_held_repeats": f"{held}/{len(reps)}",
            "at_goodput": reps[0], "probes": pr.probes, "repeats": values}


def mean_ci(values: list[float], confidence: float = 0.95, floor: float | None = None) -> dict[str, float]:
    """Mean and Student-t interval; the interval is the single value when there is one sample.
    ``floor``: clip the lower end (a goodput below 0 is not possible, however wide the interval)."""
    n = len(values)
    m = sum(values) / n if n else 0.0
    if n < 2:
        return {"mean": m, "lo": m, "hi": m, "n": n}
    from scipy import stats

    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1))
    h = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
    lo = m - h if floor is None else max(floor, m - h)
    return {"mean": m, "lo": lo, "hi": m + h, "n": n}
