"""Load strategies: they decide *when* each request is sent, nothing else.

- ``concurrency=C``: closed loop, C requests in flight; a new one is sent when one finishes.
- ``rate=R``: open loop at R requests/s; the gaps are Poisson (seeded exponential, the default),
  constant (exactly 1/R) or gamma with a burstiness value (compare/workload/arrivals.py).
- ``rate=inf``: every request at t=0 (a burst).

The executor (compare/running/executor.py) owns the tasks, timeouts and cancellation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from compare.workload.arrivals import level_offsets_ns  # noqa: F401 (the executors draw a level's sends through it)


@dataclass(frozen=True, slots=True)
class LoadLevel:
    kind: str  # "concurrency" | "rate"
    value: float
    # the level sends the workload's first ``requests`` requests (None: all of them); every
    # backend gets the same prefix (``--requests-per-stream``)
    requests: int | None = None
    # open loop only: how the gaps between sends are drawn (compare/workload/arrivals.py)
    arrival: str = "poisson"
    burstiness: float = 1.0
    # open loop only: the level sends the requests whose offsets fall in this many seconds
    # (compare/workload/duration.py sets ``requests`` to match)
    duration_s: float | None = None
    # a time-bounded level's steady state (compare/analysis/steady.py): requests due in the first
    # ``warmup_s`` or finished in the last ``cooldown_s`` of the duration are trimmed from its statistics
    warmup_s: float | None = None
    cooldown_s: float | None = None
    # trace replay: each request's send offset (ns from the level's start) taken from the trace
    # (compare/workload/traces.py) instead of drawn; ``value`` is then the trace's mean rate
    offsets_ns: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("concurrency", "rate"):
            raise ValueError(f"unknown load kind {self.kind!r}")
        if not self.value > 0:
            raise ValueError(f"{self.kind} must be > 0, got {self.value}")
        if self.kind == "concurrency" and (self.value != int(self.value) or math.isinf(self.value)):
            raise ValueError(f"concurrency must be a whole number, got {self.value}")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"a level sends at least one request, got {self.requests}")
        from compare.workload.arrivals import check_arrival

        check_arrival(self.arrival, self.burstiness)

    def take(self, requests: list) -> list:
        """The requests this level sends: the workload's first ``self.requests`` (all when unset)."""
        return requests if self.requests is None else requests[: self.requests]

    @property
    def label(self) -> str:
        if self.kind == "concurrency":
            return f"c{int(self.value)}"
        if self.offsets_ns is not None:
            return "trace"
        if math.isinf(self.value):
            return "burst"
        from compare.workload.arrivals import label_suffix

        return f"r{self.value:g}{label_suffix(self.arrival, self.burstiness)}"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "value": "inf" if math.isinf(self.value) else self.value,
                                  "label": self.label}
        if self.requests is not None:
            out["requests"] = self.requests
        if self.kind == "rate" and self.arrival != "poisson":
            out["arrival"] = self.arrival
            if self.arrival == "gamma":
                out["burstiness"] = self.burstiness
        if self.duration_s is not None:
            out["duration_s"] = self.duration_s
        if self.warmup_s is not None:
            out.update(warmup_s=self.warmup_s, cooldown_s=self.cooldown_s)
        return out


def per_stream(levels: list[LoadLevel], k: int, n: int) -> list[LoadLevel]:
    """``--requests-per-stream K``: each closed-loop level at concurrency C sends the workload's
    first min(n, K*C) requests, so a single stream is measured on a handful of requests while a
    saturated level still gets K waves; open-loop levels keep every request (their rate, not a
    stream count, sets how long they last). Levels with none closed-loop (a --trace, or a replayed
    trace run at its clock) are refused: the option would do nothing, silently."""
    if not any(lv.kind == "concurrency" for lv in levels):
        from core.errors import UserError

        raise UserError("--requests-per-stream sizes closed-loop levels (--concurrency); the levels of this run "
                        "are open-loop (a --trace or --rate sends every request): leave it out")
    return [LoadLevel(lv.kind, lv.value, min(n, k * int(lv.value))) if lv.kind == "concurrency" else lv
            for lv in levels]


def parse_levels(concurrency: str | None, rate: str | None, arrival: str = "poisson",
                 burstiness: float = 1.0) -> list[LoadLevel]:
    """``--concurrency 1,4,16`` and/or ``--rate 2,8,inf`` (its gaps drawn per ``--arrival``)."""
    levels: list[LoadLevel] = []
    for text, kind in ((concurrency, "concurrency"), (rate, "rate")):
        if not text:
            continue
        for part in text.split(","):
            part = part.strip()
            try:
                value = float(part)
            except ValueError:
                raise ValueError(f"--{kind} {text!r}: {part!r} is not a number "
                                 f"(use e.g. --{kind} 1,4,16)") from None
            levels.append(LoadLevel(kind, value, arrival=arrival, burstiness=burstiness) if kind == "rate"
                          else LoadLevel(kind, value))
    return levels


def poisson_offsets_ns(n: int, rate: float, seed: int) -> list[int]:
    """Send offsets (ns from the level's start) for n Poisson arrivals; the first is at 0."""
    from compare.workload.arrivals import offsets_ns

    return offsets_ns(n, rate, seed)
