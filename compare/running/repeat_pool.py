"""Every repeat's records of a (backend, level) so far and the pooled row over them: one rule for
`compare run --repeats` (runner.py) and `compare merge` (merge.py)."""
from __future__ import annotations

from typing import Any, Protocol

from compare.analysis.metrics import summarize
from compare.analysis.steady import steady_state
from core.records import RequestRecord
from core.results import LevelSummary
from core.results.evolve import evolve



class RunConfig(Protocol):
    """What the pooled rows read of a run's configuration (runner.RunConfig has it; so does the
    configuration `compare merge` rebuilds from a finished run)."""

    slo: Any
    lag_threshold_ms: float


def level_summary(cfg: RunConfig, records: list[RequestRecord], wall_ns: int,
                   lag: dict[str, float] | float) -> LevelSummary:
    from compare.analysis.client_health import judge_summary

    lag = {"max": lag} if isinstance(lag, (int, float)) else lag
    return evolve(summarize(records, wall_ns, cfg.slo), loop_lag_ms=dict(lag) if lag else {"max": 0.0},
                  client_lagged=judge_summary(lag, cfg.lag_threshold_ms))


class RepeatPool:
    """Records and wall time of every repeat so far, per (backend, level): the pooled summary."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[RequestRecord]] = {}
        self.wall_ns: dict[tuple[str, str], int] = {}
        self.lag: dict[tuple[str, str], dict[str, float]] = {}  # the worst max and p99 of any repeat
        self.lagged: dict[tuple[str, str], bool] = {}
        self.lag_max: dict[tuple[str, str], float] = {}  # (a cell run on a Ray cluster sends these back)

    def add(self, key: tuple[str, str], wall_ns: int, loop_lag_ms: dict[str, Any],
            records: list[RequestRecord], lagged: bool = False) -> None:
        """One repeat's run of a level: its records, wall time, client lag and whether it fell behind."""
        self.records.setdefault(key, []).extend(records)
        self.wall_ns[key] = self.wall_ns.get(key, 0) + wall_ns
        lag = self.lag.setdefault(key, {"max": 0.0})
        for k in ("max", "p99"):
            if loop_lag_ms.get(k) is not None:
                lag[k] = max(lag.get(k, 0.0), loop_lag_ms[k])
        self.lagged[key] = self.lagged.get(key, False) or lagged
        self.lag_max[key] = lag["max"]

    def pooled(self, cfg: RunConfig, key: tuple[str, str], latest: LevelSummary, repeats: int) -> LevelSummary:
        """The pooled row over every repeat added so far; ``latest`` is the last repeat's own row.
        One rule for `compare run --repeats` and `compare merge` (compare/running/merge.py)."""
        pooled = level_summary(cfg, self.records[key], self.wall_ns[key], self.lag[key])
        # server-side samples are per level run; the pooled row shows the latest one
        own = {k: getattr(latest, k) for k in _LATEST if k in latest.model_fields_set}
        # (a merge of finished runs passes no levels: its repeats keep their own steady-state rows)
        level = next((lv for lv in getattr(cfg, "levels", ()) if lv.label == key[1]), None)
        if level is not None and (steady := steady_state(level, self.records[key])) is not None:
            own["steady_state"] = steady  # every repeat's counts
        # (client_lagged: some repeat's client fell behind)
        return evolve(pooled, client_lagged=self.lagged[key], **own, repeats=repeats)


_LATEST = ("server_metrics", "server_gauges", "prefix_cache", "time_breakdown", "telemetry", "aborted", "sessions")
