"""Every repeat's records of a (backend, level) so far and the pooled row over them: one rule for
`compare run --repeats` (runner.py), `compare merge` (merge.py) and the Ray merge (ray_merge.py),
built by the level assembler (level_assembly.py)."""
from __future__ import annotations

from typing import Any

from compare.analysis.steady import steady_state
from compare.running.level_assembly import RunConfig, level_summary
from core.records import RequestRecord
from core.results import LevelSummary
from core.results.evolve import evolve


class RepeatPool:
    """Records and wall time of every repeat so far, per (backend, level): the pooled summary."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[RequestRecord]] = {}
        self.wall_ns: dict[tuple[str, str], int] = {}
        self.lag: dict[tuple[str, str], dict[str, float]] = {}  # the worst max and p99 of any repeat
        self.lagged: dict[tuple[str, str], bool] = {}

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
