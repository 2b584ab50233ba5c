"""The answer first: one plain sentence per question a reader came with.

With an SLO, one headline per SLO term: which backend serves the most output tokens/s while
meeting it, at which load, by how much, and how sure that is. Without one: who has the highest
throughput and who the lowest first-token latency at the lightest load. The console, the
Markdown and the HTML report all open with these lines (compare/report/).
"""
from __future__ import annotations

import math
from typing import Callable

from core.metrics import get, latency
from core.results import LevelSummary, RunResults
from core.slo import SLO, SLOTerm
from compare.analysis.verdict import Verdict

Label = Callable[[str], str]


def _ms(v: float) -> str:
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.1f} ms"


def _times(a: float, b: float) -> str:
    """How many times a is b (a >= b), in words a reader parses at a glance."""
    if b <= 0 or not math.isfinite(a / b):
        return "-"
    r = a / b
    return f"{r:.1f}x" if r >= 1.95 else f"+{(r - 1) * 100:.0f}%"


def _sure(v: Verdict, a: str, b: str, level: str, metric: str) -> str:
    """How sure the difference between a and b at ``level`` is, from the verdict's comparison."""
    for c in v.comparisons:
        if c.level == level and c.metric == metric and {c.a, c.b} == {a, b}:
            if c.ci is None or c.p_holm is None:
                return "point estimate"
            if c.significant:
                return f"significant, p={c.p_holm:.3f}"
            return f"not significant, p={c.p_holm:.2f}"
    return "point estimate"


def _joined(parts: list[tuple[str, str]]) -> str:
    """'17.9x vllm, 302.2x hf (point estimates)': how sure, said once when it is the same for all."""
    sure = {s for _, s in parts}
    if len(sure) == 1 and len(parts) > 1:
        (s,) = sure
        return ", ".join(t for t, _ in parts) + f" ({s.replace('point estimate', 'point estimates')})"
    return ", ".join(f"{t} ({s})" for t, s in parts)


def _levels(run: RunResults, name: str) -> dict[str, LevelSummary]:
    return {lb: s for lb, s in run.backends[name].levels.items() if s.ok}


_TIE = 0.02  # throughputs within 2% are the same for a headline


def _value(run: RunResults, name: str, level: str, term: SLOTerm) -> float | None:
    check = (run.backends[name].levels[level].slo_checks or {}).get(term.key)
    return None if check is None or check.value_ms is None or not math.isfinite(check.value_ms) else check.value_ms


def _slo_line(run: RunResults, v: Verdict, term: SLOTerm, label: Label) -> str:
    best: dict[str, tuple[float, str]] = {}  # backend -> (out tok/s, level) at its best level meeting the term
    closest: tuple[float, str, str] | None = None
    for n in v.backends:
        for lb, s in _levels(run, n).items():
            check = (s.slo_checks or {}).get(term.key)
            if check is None:
                continue
            if check.met and s.output_tok_s > best.get(n, (-1.0, ""))[0]:
                best[n] = (s.output_tok_s, lb)
            if check.value_ms is not None and math.isfinite(check.value_ms) and (
                    closest is None or check.value_ms < closest[0]):
                closest = (check.value_ms, n, lb)
    head = f"{get(term.metric).label} {term.stat} <= {_ms(term.limit_ms)}:"
    if not best:
        return f"{head} no backend meets it at any load" + (_closest_ranked(run, v, term, label) if closest else "")
    ranked = sorted(best.items(), key=lambda kv: -kv[1][0])
    (w, (tps, lb)) = ranked[0]
    text = f"{head} {label(w)} serves the most within it, {tps:.1f} out tok/s at {lb}"
    if len(ranked) > 1:
        o, (otps, olb) = ranked[1]
        if tps <= otps * (1 + _TIE) and lb == olb:  # same throughput: the margin to the limit decides
            a, b = (_value(run, n, lb, term) for n in (w, o))
            if a is not None and b is not None and a != b:
                lo, hi = (w, o) if a < b else (o, w)
                text = (f"{head} {label(w)} and {label(o)} both hold it up to {lb} at the same throughput "
                        f"({tps:.1f} vs {otps:.1f} out tok/s); {label(lo)} has the lower "
                        f"{get(term.metric).label} {term.stat} there, {_ms(min(a, b))} vs {_ms(max(a, b))} "
                        f"({_sure(v, w, o, lb, term.key)})")
            else:
                text += f", level with {label(o)} ({otps:.1f})"
        else:
            # a paired test exists only at one load: the winner's, where both were measured
            sure = _sure(v, w, o, lb, "output_tok_s") if lb in _levels(run, o) else "point estimate"
            text += f", {_times(tps, otps)} {label(o)}'s {otps:.1f} at {olb} ("
            text += f"{sure})" if lb == olb or sure == "point estimate" else f"throughput at {lb}: {sure})"
    missing = []
    for n in v.backends:
        if n not in best:  # how far off it stays: its closest value at any load
            vals = [(x, lb) for lb in _levels(run, n) if (x := _value(run, n, lb, term)) is not None]
            near = f" (closest {_ms(min(vals)[0])} at {min(vals)[1]})" if vals else ""
            missing.append(f"{label(n)} never meets it{near}")
    if missing:
        text += "; " + "; ".join(missing)
    return text


def _closest_ranked(run: RunResults, v: Verdict, term: SLOTerm, label: Label) -> str:
    """When nobody meets a term, the answer still ranks the columns: the closest one (its lowest
    value, where), how far over the limit it stays, and how much lower it is than each other
    column at that same load (how sure, as the verdict's comparison says); a column not measured
    there, by its own closest value."""
    vals = {n: [(x, lb) for lb in _levels(run, n) if (x := _value(run, n, lb, term)) is not None] for n in v.backends}
    x0, lb0, w = min((min(xs) + (n,) for n, xs in vals.items() if xs), key=lambda t: t[:1])
    over = x0 / term.limit_ms if term.limit_ms > 0 else math.inf
    off = f"{over:.1f}x the limit" if over >= 1.95 else f"{(over - 1) * 100:.0f}% over it"
    text = f"; closest: {label(w)}, {_ms(x0)} at {lb0} ({off})"
    there = sorted(((x, o) for o in v.backends if o != w and (x := _value(run, o, lb0, term)) is not None))
    parts = []
    for x, o in there:
        r = x / x0 if x0 > 0 else math.inf
        by = f"{r:.1f}x" if r >= 1.95 else f"{(1 - x0 / x) * 100:.0f}%"
        parts.append((f"{by} lower than {label(o)}'s {_ms(x)}", _sure(v, w, o, lb0, term.key)))
    if parts:
        text += ": " + _joined(parts)
    rest = [f"{label(o)} {_ms(min(xs)[0])} at {min(xs)[1]}" for o, xs in vals.items()
            if o != w and xs and _value(run, o, lb0, term) is None]
    if rest:
        text += "; " + ", ".join(rest)
    return text


def _peak_line(run: RunResults, v: Verdict, label: Label) -> str | None:
    peaks = {}
    for n in v.backends:
        lv = _levels(run, n)
        if lv:
            lb = max(lv, key=lambda k: lv[k].output_tok_s)
            peaks[n] = (lv[lb].output_tok_s, lb)
    if not peaks:
        return None
    ranked = sorted(peaks.items(), key=lambda kv: -kv[1][0])
    w, (tps, lb) = ranked[0]
    text = f"Throughput: {label(w)} peaks at {tps:.1f} out tok/s ({lb})"
    others = []
    for o, (otps, olb) in ranked[1:]:
        sure = _sure(v, w, o, lb, "output_tok_s") if lb == olb else "point estimate"
        others.append((f"{_times(tps, otps)} {label(o)}", sure))
    return text + (": " + _joined(others) if others else "")


def _latency_line(run: RunResults, v: Verdict, label: Label, metric: str, what: str) -> str | None:
    if not v.levels:
        return None
    lb = v.levels[0]  # the lightest load: latency without queueing
    vals = {n: d.p50 for n in v.backends
            if (s := _levels(run, n).get(lb)) is not None and (d := getattr(s, f"{metric}_ms")) is not None}
    if not vals:
        return None
    ranked = sorted(vals.items(), key=lambda kv: kv[1])
    w, best = ranked[0]
    text = f"{what} at {lb}: {label(w)}{' fastest,' if len(ranked) > 1 else ''} {get(metric).label} p50 {_ms(best)}"
    others = []
    for o, val in ranked[1:]:
        r = val / best if best > 0 else math.inf
        by = f"{r:.1f}x" if r >= 1.95 else f"{(1 - best / val) * 100:.0f}%"
        others.append((f"{by} lower than {label(o)}", _sure(v, w, o, lb, f"{metric}_p50")))
    return text + (": " + _joined(others) if others else "")


def headlines(run: RunResults, v: Verdict, label: Label = str) -> list[str]:
    """The answer, one line per SLO term (or throughput and latency without an SLO); each says
    how sure it is (the test's p value, or 'point estimate' without repeats)."""
    if len(v.backends) < 1:
        return ["nothing was measured: no backend completed a load level"]
    slo = SLO.from_json(v.slo)
    if slo:
        lines = [_slo_line(run, v, t, label) for t in slo.terms]
    else:
        lines = [x for x in (_peak_line(run, v, label), *(_latency_line(run, v, label, m.key, m.headline)
                                                          for m in latency() if m.plotted)) if x]
    return lines
