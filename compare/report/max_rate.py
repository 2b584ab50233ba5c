"""The report's "max rate meeting the SLO" part (``compare run --find-max-rate``): one answer line
per backend and every probe, from run.json's ``backends[NAME].max_rate``."""
from __future__ import annotations

from typing import Callable

from core.results import RunResults
from compare.tuning.max_rate import answer_line, fmt_rate

HEADERS = ["backend", "start", "rate", "SLO met", "kept up", "within SLO", "achieved",
           "TTFT p95 ms", "TPOT p95 ms"]
MEANING = ("each probe sends the whole request list as Poisson arrivals at that rate; a rate counts as met "
           "when every SLO term holds and the engine achieved at least half the offered rate. The answer "
           "is the highest probed rate that met it; the limit lies between that and the next rate, which "
           "missed")


def answer_lines(run: RunResults, label: Callable[[str], str]) -> list[str]:
    return [answer_line(label(n), b.max_rate) for n, b in run.backends.items() if b.max_rate]


def probe_rows(run: RunResults, label: Callable[[str], str]) -> list[list[str]]:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    rows = []
    for n, b in run.backends.items():
        for start in b.max_rate.repeats if b.max_rate else []:
            for p in start.probes:
                # a session search's rate starts sessions; what it achieved counts their turns
                unit, done = ("req/s", "req/s") if b.max_rate.search.unit == "req/s" else (b.max_rate.search.unit,
                                                                                          "turns/s")
                rows.append([label(n), str(start.repeat + 1), f"{fmt_rate(p.rate)} {unit}",
                             "yes" if p.slo_met else "no", "yes" if p.sustained else "no",
                             f"{p.slo_attainment or 0:.0%}", f"{p.req_s:.2f} {done}", ms(p.ttft_p95_ms),
                             ms(p.tpot_p95_ms)])
    return rows
