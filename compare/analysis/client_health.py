"""Was the client healthy while it measured a level, and if not, which numbers did it distort?

The executor's loop-lag monitor wakes every 10 ms and notes how late it woke (``LagSamples``):
a late wake-up is time the event loop was busy with something else, during which it could not
read a token, stamp it (user-space stamps), or send the next request. One late wake-up says
little: the level's first instant, when every stream connects and sends at once, lags by tens of
ms on any machine, once. What says the client fell behind is lag
that lasts: a high p99, a large share of the level's time spent late, many token arrivals or
sends inside those stalls. So the judgement is over the whole level, in three statistics that
say what they mean:

- ``lag_p99_ms``: 1 % of the loop's wake-ups were later than this;
- ``lagged_share``: the share of the level's time the loop was stalled past ``STALL_MS`` (the
  sum of those stalls over the level's length);
- ``affected``: per metric, how many of its observations fell inside such a stall, and the
  longest stall they met: ``ttft`` (first tokens), ``itl`` (every later token event),
  ``send`` (requests due to leave: a stall holds them back). That is how much the client *may*
  have distorted each metric: with kernel receive stamps (backends/http/rxstamp.py) an arrival
  is stamped when the bytes came, whatever the loop was doing, so the count is an upper bound.

``fell_behind`` (the level's ``client_lagged``: its numbers are marked invalid) needs lag that
lasted: p99 over the run's threshold (RunConfig.lag_threshold_ms, 50 ms) from at least
``MIN_OVER`` wake-ups over it, or the loop stalled
for ``FELL_BEHIND_SHARE`` of the level, or that share of the token events (they span the whole
level) inside stalls. First tokens and sends are not part of it: in a closed loop every
stream's first request leaves, and its first token comes, in the level's first instant, so one
stall there meets a whole round of them. A single spike, however long, is reported
(``lag_max_ms``, when, what it touched), not used to invalidate.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

STALL_MS = 5.0  # a wake-up later than this is a stall (sub-ms lateness is a busy loop's normal jitter)
# a p99 over the threshold counts from this many wake-ups over it: a level of a few seconds has a
# few hundred, and a closed loop's few round ends (every stream ending at once) are not lasting lag
MIN_OVER = 5
# stalled this share of the level's time, or this share of its token events inside stalls. Not
# less: a busy client that keeps up (512 streams ending together on a loaded 2-core machine,
# ingesting 99 % of the offer) stalls 6-8 % of the level past 5 ms, meeting 5-6 % of the events
FELL_BEHIND_SHARE = 0.20


@dataclass(frozen=True)
class LagSamples:
    """The monitor's wake-ups: ``t_ns[i]`` when it woke (perf_counter_ns), ``lag_ms[i]`` how late."""

    t_ns: Sequence[int]
    lag_ms: Sequence[float]
    interval_ms: float = 10.0


def stalls(lags: LagSamples, stall_ms: float = STALL_MS) -> list[tuple[int, int, float]]:
    """(start_ns, end_ns, lag_ms) of every wake-up later than ``stall_ms``: the loop was busy from
    when it should have woken to when it did."""
    return [(t - int(lag * 1e6), t, lag) for t, lag in zip(lags.t_ns, lags.lag_ms) if lag > stall_ms]


def _hits(times: Iterable[int], windows: list[tuple[int, int, float]]) -> tuple[int, int, float]:
    """(observations, how many inside a window, the longest window they met); ``windows`` sorted
    and disjoint (one wake-up's stall ends before the next one's starts)."""
    import numpy as np

    t = np.fromiter(times, dtype=np.int64)
    if not t.size or not windows:
        return int(t.size), 0, 0.0
    w = np.asarray([(a, b) for a, b, _ in windows], dtype=np.int64)
    i = np.searchsorted(w[:, 1], t)  # the first window ending at or after each observation
    inside = i < len(w)
    inside[inside] = w[i[inside], 0] <= t[inside]
    lags = np.asarray([x[2] for x in windows])
    return int(t.size), int(inside.sum()), float(lags[i[inside]].max()) if inside.any() else 0.0


def _quantile(sorted_x: list[float], q: float) -> float:
    return sorted_x[min(len(sorted_x) - 1, int(q * len(sorted_x)))] if sorted_x else 0.0


def judge(lags: LagSamples, t_start_ns: int, t_end_ns: int, records: Sequence[Any] = (), *,
          threshold_ms: float = 50.0, stall_ms: float = STALL_MS) -> dict[str, Any]:
    """The level's client health (the ``client_health`` of its summary; see the module doc).
    ``records``: core.records.RequestRecord (their sends and arrivals are matched to the stalls)."""
    window_s = max((t_end_ns - t_start_ns) / 1e9, 1e-9)
    lag = sorted(lags.lag_ms)
    win = stalls(lags, stall_ms)
    stalled_s = sum(w[2] for w in win) / 1e3
    worst = max(range(len(lags.lag_ms)), key=lags.lag_ms.__getitem__, default=None)
    out: dict[str, Any] = {
        "window_s": round(window_s, 3), "samples": len(lag), "stall_ms": stall_ms,
        "lag_p50_ms": round(_quantile(lag, 0.5), 3), "lag_p99_ms": round(_quantile(lag, 0.99), 3),
        "lag_max_ms": round(lag[-1], 3) if lag else 0.0,
        "lag_max_at_s": round((lags.t_ns[worst] - t_start_ns) / 1e9, 3) if worst is not None else None,
        "stalls": len(win), "lagged_share": round(min(1.0, stalled_s / window_s), 4),
    }
    ok = [r for r in records if r.event_times_ns]
    due = _due(records)
    observed = {"ttft": (len(ok), lambda: (r.event_times_ns[0] for r in ok)),
                "itl": (sum(len(r.event_times_ns) - 1 for r in ok),
                        lambda: (t for r in ok for t in r.event_times_ns[1:])),
                "send": (len(due), lambda: due)}
    affected = {}
    for metric, (n, times) in observed.items():
        # without a stall nothing is walked (a long level has millions of events)
        _, hit, longest = _hits(times(), win) if win else (n, 0, 0.0)
        if n:
            affected[metric] = {"n": n, "in_stalls": hit, "share": round(hit / n, 4), "max_lag_ms": round(longest, 3)}
    out["affected"] = affected
    why = []
    over = sum(1 for x in lag if x > threshold_ms)
    if out["lag_p99_ms"] > threshold_ms and over >= MIN_OVER:
        why.append(f"loop lag p99 {out['lag_p99_ms']:.0f} ms > {threshold_ms:g} ms ({over} wake-ups over it)")
    if out["lagged_share"] >= FELL_BEHIND_SHARE:
        why.append(f"loop stalled {out['lagged_share']:.0%} of the level")
    itl = affected.get("itl")
    if itl and itl["share"] >= FELL_BEHIND_SHARE:  # token events span the level: stalls through much of it
        why.append(f"{itl['share']:.0%} of {_NOUN['itl']} inside stalls")
    out["fell_behind"] = bool(why)
    out["why"] = "; ".join(why) or None
    windows = [w for r in records if (w := getattr(r, "send_window_ns", None))]
    if windows:
        out["preempted_sends"] = len(windows)
        out["preempted_send_max_ms"] = round(max(windows) / 1e6, 3)
    return out


def _due(records: Sequence[Any]) -> list[int]:
    """When each request was due to leave: its scheduled time (open loop), or the end of the
    response before it on its stream (closed loop). A stream's first request has no such instant
    (every stream starts at once, and the level's first moment is spent sending them): left out,
    as its wait is the level's start, not a stall."""
    ends = {r.event_times_ns[-1] if r.event_times_ns else r.t_end_ns for r in records}
    return [r.t_scheduled_ns if r.t_scheduled_ns is not None else r.t_ready_ns for r in records
            if r.t_scheduled_ns is not None or (r.t_ready_ns is not None and r.t_ready_ns in ends)]


def judge_summary(lag: dict[str, float], threshold_ms: float = 50.0) -> bool:
    """The hard flag from a lag summary alone (no samples: a level sent by several processes, or a
    pooled summary): the p99 when there is one, else the max (what older runs recorded)."""
    p99 = lag.get("p99")
    return (p99 if p99 is not None else lag.get("max", 0.0)) > threshold_ms


_NOUN = {"ttft": "first tokens", "itl": "token events", "send": "due sends"}


def distortion(health: Any, min_lag_ms: float = 0.0) -> str | None:
    """One clause for the reader: which metrics the client may have distorted, and by how much
    at most; None when no observation met a stall (of at least ``min_lag_ms``). ``health``: a
    ClientHealth (or its dict)."""
    h = health if isinstance(health, dict) else health.model_dump()
    parts = []
    for metric in ("ttft", "itl", "send"):
        a = (h.get("affected") or {}).get(metric)
        if a and a["in_stalls"] and a["max_lag_ms"] >= min_lag_ms:
            parts.append(f"{a['in_stalls']} of {a['n']} {_NOUN[metric]} ({a['share']:.1%}) "
                         f"by up to {a['max_lag_ms']:.0f} ms")
    if not parts:
        return None
    at = h.get("lag_max_at_s")
    where = f", longest {h['lag_max_ms']:.0f} ms at +{at:.1f} s" if at is not None else ""
    return (f"loop stalled {h['stalls']}x over {h['stall_ms']:g} ms ({h['lagged_share']:.1%} of the level{where}, "
            f"lag p99 {h['lag_p99_ms']:.1f} ms): may have delayed " + ", ".join(parts))


def lag_words(s: Any) -> str:
    """Why a level's client counts as fallen behind: its health's reasons, or (runs recorded
    before them) the loop's longest lag."""
    if s.client_health is not None and s.client_health.why:
        return s.client_health.why
    lag = s.loop_lag_ms
    if lag is None:
        return "loop lag not recorded"
    if lag.p99 is None:
        return f"loop lag max {lag.max:.0f} ms"
    return f"loop lag p99 {lag.p99:.0f} ms, max {lag.max:.0f} ms"
