"""The level assembler: one level's records, and what was measured around them, into its row of
run.json (a LevelSummary). One rule wherever a level is summarised: a local run (runner.py), a Ray
cell (the same runner code on the cell's node: ray_cells.py) and the pooled rows over repeats
(repeat_pool.py: ``--repeats``, ``compare merge`` and the Ray merge), so the same records give the
same row on every path."""
from __future__ import annotations

from typing import Any, Protocol

from compare.analysis.metrics import summarize
from compare.analysis.steady import measured_ns, steady_state
from compare.analysis.turns import session_stats
from compare.running.outcome import LevelOutcome
from compare.workload.schedule import LoadLevel
from core.records import GenerationRequest, RequestRecord
from core.results import LevelSummary
from core.results.evolve import evolve


class RunConfig(Protocol):
    """What a level's row reads of a run's configuration (runner.RunConfig has it; so does the
    configuration `compare merge` rebuilds from a finished run)."""

    slo: Any
    lag_threshold_ms: float


def level_summary(cfg: RunConfig, records: list[RequestRecord], wall_ns: int,
                  lag: dict[str, float]) -> LevelSummary:
    """The statistics of ``records`` over ``wall_ns`` and the client's loop lag (its max and p99):
    the core of every row."""
    from compare.analysis.client_health import judge_summary

    return evolve(summarize(records, wall_ns, cfg.slo), loop_lag_ms=dict(lag) if lag else {"max": 0.0},
                  client_lagged=judge_summary(lag, cfg.lag_threshold_ms))


def client_health(cfg: RunConfig, o: LevelOutcome) -> dict[str, Any]:
    """The client over the level, judged from every wake-up of its lag monitor, not one spike
    (compare/analysis/client_health.py); several processes: each with the records it sent, the
    worst one kept. Nothing where no samples came back (Ray load shards)."""
    from compare.analysis.client_health import judge

    if o.lag_samples is not None:
        h = judge(o.lag_samples, o.t_start_ns, o.t_end_ns, o.records, threshold_ms=cfg.lag_threshold_ms)
    elif o.lag_samples_by_proc:
        each = [(judge(s, o.t_start_ns, o.t_end_ns, recs, threshold_ms=cfg.lag_threshold_ms), k)
                for k, (s, recs) in enumerate(o.lag_samples_by_proc, 1)]
        h, k = max(each, key=lambda x: (x[0]["fell_behind"], x[0]["lagged_share"], x[0]["lag_p99_ms"]))
        if h["why"]:
            h["why"] = f"client process {k}: {h['why']}"
    else:
        return {}
    return {"client_health": h, "client_lagged": h["fell_behind"]}


def assemble_level(cfg: RunConfig, level: LoadLevel, requests: list[GenerationRequest],
                   records: list[RequestRecord], o: LevelOutcome, *, telemetry: Any = None,
                   server_metrics: dict[str, Any] | None = None, framework: str = "") -> LevelSummary:
    """A level that ran to its end: ``records`` (trimmed and stamped with their repeat) with the
    outcome's timing and client health, the telemetry sampled while it ran (an object with
    ``summary(output_tokens)``), the server's metrics around it and the breakdowns built from them."""
    from compare.analysis.breakdown import level_extras

    summary = level_summary(cfg, records, measured_ns(o), o.loop_lag_ms)
    add: dict[str, Any] = client_health(cfg, o)
    if o.client_procs is not None:
        add["client_procs"] = o.client_procs
    if telemetry is not None:
        add["telemetry"] = telemetry.summary(summary.output_tokens)
    if server_metrics is not None:
        add["server_metrics"] = server_metrics
    # queue/prefill/decode vs outside the engine, prefix-cache hits, gauges at the target load
    add.update(level_extras(records, add.get("server_metrics"),
                            int(level.value) if level.kind == "concurrency" else None, framework))
    if (turns := session_stats(records, requests)) is not None:
        add["sessions"] = turns  # multi-turn sessions: by turn index (compare/analysis/turns.py)
    if o.schedule_offsets_ns is not None:
        add["schedule_offsets_ns"] = o.schedule_offsets_ns
    if (steady := steady_state(level, records)) is not None:
        add["steady_state"] = steady
    if o.aborted:
        add["aborted"] = o.aborted
    return evolve(summary, **add)


def assemble_interrupted(cfg: RunConfig, o: LevelOutcome, records: list[RequestRecord]) -> LevelSummary:
    """A level a stop signal cut short: its completed part, marked as aborted."""
    summary = level_summary(cfg, records, o.t_end_ns - o.t_start_ns, o.loop_lag_ms)
    add: dict[str, Any] = client_health(cfg, o)
    done = sum(1 for r in o.records if r.error_kind != "cancelled")
    if o.client_procs is not None:
        add["client_procs"] = o.client_procs
    add["aborted"] = (f"interrupted: {done} of {o.planned} requests finished, "
                      f"{len(o.records) - done} cancelled in flight")
    return evolve(summary, **add)
