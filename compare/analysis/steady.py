"""Steady state of time-bounded levels (``--duration`` with ``--warmup-seconds``/``--cooldown-seconds``).

A level of D seconds measures the window [W, D - C] of its own clock: a request is counted when
it was due at or after W (its seeded send offset: the same requests on every backend) and
finished by D - C. The others stay in requests.jsonl, marked ``trimmed`` ("warmup": due before
the window, the engine still filling from empty; "cooldown": finished after it), and are left out
of every statistic (compare/analysis/metrics.py ``summarize`` skips them). The cool-down's sends
keep the load on while the window's last requests finish. An engine that cannot keep up shows
it twice: the counted requests' latency grows with their send time, and many requests finish
after the window (trimmed as cool-down) instead of draining unseen after the last send.

The level's clock is recovered from the records themselves (a record's scheduled send time minus
its request's offset), so the marks are the same whoever sent the level: one process, several
client processes, or Ray load shards on the driver's clock. Throughput over a trimmed level is
the counted requests' over the window's length.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from compare.workload.arrivals import level_offsets_ns
from core.records import RequestRecord
from core.results.steady import SteadyState

WARMUP, COOLDOWN = "warmup", "cooldown"


def window_ns(level: Any) -> tuple[int, int] | None:
    """[start, end] of the measured window in ns from the level's start; None: nothing trimmed."""
    d, w = getattr(level, "duration_s", None), getattr(level, "warmup_s", None)
    if d is None or w is None:
        return None
    return int(w * 1e9), int((d - level.cooldown_s) * 1e9)


class Trim:
    """Marks a level's records (``Trim(level, requests, seed)(record)``); a no-op for a level
    without a window."""

    def __init__(self, level: Any, requests: Sequence[Any], seed: int) -> None:
        self.window = window_ns(level)
        self.offset: dict[str, int] = {}
        if self.window is not None:
            offs = level_offsets_ns(level, len(requests), seed)
            self.offset = {r.request_id: o for r, o in zip(requests, offs)}

    def __call__(self, rec: RequestRecord) -> RequestRecord:
        off = self.offset.get(rec.request_id)
        if self.window is None or off is None or rec.t_scheduled_ns is None:
            return rec
        if off < self.window[0]:
            return dataclasses.replace(rec, trimmed=WARMUP)
        t0 = rec.t_scheduled_ns - off  # the level's start, on this record's clock
        end = rec.t_end_ns if rec.t_end_ns is not None else rec.t_sent_ns
        if end - t0 > self.window[1]:
            return dataclasses.replace(rec, trimmed=COOLDOWN)
        return rec


def measured_ns(outcome: Any) -> int:
    """The wall time a level's throughput is over (``outcome``: a compare/running/outcome.py
    LevelOutcome): its window when trimmed, else first send to last end."""
    w = window_ns(outcome.level)
    return outcome.t_end_ns - outcome.t_start_ns if w is None else w[1] - w[0]


def steady_state(level: Any, records: Sequence[RequestRecord]) -> SteadyState | None:
    """The level's ``steady_state`` section (every repeat's records pooled, if given)."""
    w = window_ns(level)
    if w is None:
        return None
    n = {WARMUP: 0, COOLDOWN: 0, None: 0}
    for r in records:
        n[r.trimmed] = n.get(r.trimmed, 0) + 1
    return SteadyState(duration_s=level.duration_s, window_s=[w[0] / 1e9, w[1] / 1e9], counted=n[None],
                       trimmed_warmup=n[WARMUP], trimmed_cooldown=n[COOLDOWN])


def words(label: str, s: SteadyState) -> str:
    """One line for the reader: what was measured and what was left out."""
    line = (f"{label}: steady state measured {s.window_s[0]:g}-{s.window_s[1]:g} s of {s.duration_s:g} s; "
            f"{s.counted} request(s) counted, {s.trimmed_warmup} due in the warm-up and "
            f"{s.trimmed_cooldown} finished after the window left out (kept in requests.jsonl)")
    if s.trimmed_cooldown > s.counted:
        line += "; more finished after the window than in it: the engine did not keep up with the offered rate"
    return line
