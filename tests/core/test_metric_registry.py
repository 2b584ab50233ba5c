"""The metric registry (core/metrics.py) and every consumer of it: each registry metric must reach
the SLO, the statistics, the verdict's and the gate's defaults, the level summary, length matching,
the console and report tables and the plots. A consumer that keeps its own list of metrics fails
here as soon as the registry gains one it does not name."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from compare.analysis import length_match, stats, verdict
from compare.analysis.metrics import request_meets_slo, summarize
from compare.report import plots
from compare.report.console import comparison_table, latency_columns
from core import metrics as reg
from core.results import as_run
from core.slo import SLO, SLOError
from tests.synth import make_run, records

LATENCY = [m for m in reg.REGISTRY if m.kind != reg.LEVEL]


def _run(slo: list | None = None, repeats: int = 2):
    cells = {"a": [records("a", "c1", k, seed=k) for k in range(repeats)],
             "b": [records("b", "c1", k, ttft_ms=30, seed=k + 5) for k in range(repeats)]}
    return make_run(cells, slo=slo)


def _every_term() -> list[dict]:
    """One SLO term per SLO-able metric, at its last allowed statistic, loose enough to be met."""
    return [{"metric": m.key, "stat": m.slo_stats[-1], "limit_ms": 1e6} for m in reg.REGISTRY if m.slo_stats]


def test_registry_is_consistent():
    keys = [m.key for m in reg.REGISTRY]
    assert len(keys) == len(set(keys)) and set(reg.BY_KEY) == set(keys)
    for m in reg.REGISTRY:
        assert m.kind in (reg.REQUEST, reg.TOKEN, reg.LEVEL)
        assert m.compared in (reg.ALWAYS, reg.WHEN_LIMITED, reg.WITH_SLO, reg.NEVER)
        assert set(m.default_stats) <= set(m.compare_stats), m.key
        assert all(st.startswith("p") for st in m.compare_stats), m.key  # the tests resample percentiles
        assert set(m.narrow_stats) <= set(m.table_stats), m.key
        assert set(m.slo_stats) <= set(reg.SLO_STATS), m.key
        assert (m.extract_ns is None) == (m.kind == reg.LEVEL), m.key  # per-request metrics have an extractor
        if m.kind == reg.LEVEL:
            assert not (m.compare_stats or m.slo_stats or m.table_stats), m.key  # one value, no statistic
        else:
            assert m.compare_stats and m.table_stats, f"{m.key}: not compared or not shown"
    # TTFT, TPOT and ITL are first-class everywhere: in the SLO, compared, shown in the tables
    for key in ("ttft", "tpot", "itl", "e2e"):
        assert reg.get(key).slo_stats and reg.get(key).compare_stats and reg.get(key).table_stats


def test_slo_accepts_every_registry_metric_and_only_those():
    for m in reg.REGISTRY:
        for st in m.slo_stats:
            assert SLO.parse(f"{m.key}_{st}=5ms").terms[0].metric == m.key
    with pytest.raises(SLOError, match="metrics \\['ttft', 'tpot', 'itl', 'e2e'\\]"):
        SLO.parse("output_tok_s_p50=5ms")  # a level metric has no per-request limit
    with pytest.raises(SLOError):
        SLO.parse("ttft_p42=5ms")


def test_level_summary_and_slo_checks_cover_every_latency_metric():
    recs = records("a", "c1", 0)
    wall = max(r.t_end_ns for r in recs) - min(r.t_sent_ns for r in recs)
    slo = SLO.from_json(_every_term())
    s = summarize(recs, wall, slo).model_dump()
    for m in LATENCY:
        assert s[m.summary_key] is not None and s[m.summary_key]["n"] > 0, m.key
    assert set(s["slo_checks"]) == {f"{t['metric']}_{t['stat']}" for t in _every_term()}
    assert all(c["met"] for c in s["slo_checks"].values())
    assert all(request_meets_slo(r, slo) for r in recs)
    # a tight limit on any one metric fails requests: each term is applied per request
    for t in _every_term():
        tight = SLO.from_json([{**t, "limit_ms": 0.0}])
        assert not all(request_meets_slo(r, tight) for r in recs), t["metric"]


def test_statistics_offer_every_compared_statistic_and_collect_every_source():
    for m in reg.REGISTRY:
        for st in m.compare_stats or (None,):
            d = stats.METRICS[m.stat_key(st)]
            assert (d.source, d.kind, d.higher_is_better, d.unit) == (m.key, m.kind, m.higher_is_better, m.unit)
    run, recs = _run(_every_term())
    for b in run["backends"].values():  # goodput is written with an SLO; the synthetic run has none
        for r in b["repeats"]:
            r["levels"]["c1"]["goodput_req_s"] = 1.0
    sample = stats.collect(run, recs)[("a", "c1")]
    for m in reg.REGISTRY:
        where = {reg.REQUEST: sample.per_request, reg.TOKEN: sample.per_token, reg.LEVEL: sample.per_repeat}[m.kind]
        assert m.key in where, m.key
    for key in stats.METRICS:
        assert sample.value(key) == sample.value(key)  # not NaN: every offered metric has a value


def test_verdict_and_gate_defaults_follow_the_slo():
    assert set(stats.default_metrics(as_run(_run()[0]))) == {
        k for m in reg.REGISTRY if m.compared == reg.ALWAYS
        for k in ((m.key,) if m.kind == reg.LEVEL else (m.stat_key(s) for s in m.default_stats))}
    for m in reg.REGISTRY:
        if not m.slo_stats:
            continue
        st = m.compare_stats[-1]
        chosen = stats.default_metrics(as_run(_run([{"metric": m.key, "stat": st, "limit_ms": 1e6}])[0]))
        assert m.stat_key(st) in chosen, f"{m.key}: limited by the SLO, not compared"
        assert "goodput_req_s" in chosen


def test_length_matching_keeps_and_marks_every_metric():
    assert {m.summary_key for m in reg.REGISTRY} <= set(length_match._KEEP)
    cut = {k for k, d in stats.METRICS.items() if reg.get(d.source).cut_by_length_match}
    assert verdict._CUT_METRICS == cut and "ttft_p50" not in cut and "itl_p99" in cut
    for m in reg.REGISTRY:
        assert (m.label in verdict._CUT_LABELS) == m.cut_by_length_match


def _table(run: dict, width: int | None) -> str:
    c = Console(file=io.StringIO(), width=width or 400, force_terminal=False)
    c.print(comparison_table(as_run(run), width))
    return c.file.getvalue()


def test_console_and_report_tables_show_every_metric_and_the_slo_statistic(tmp_path):
    run, recs = _run()
    cols = latency_columns(as_run(run))
    assert {metric for _, metric, *_ in cols} == {m.key for m in LATENCY}
    wide = _table(run, None)
    for m in LATENCY:
        assert m.label in wide, m.key
    # an SLO statistic that is no default column becomes one, and is the first kept when narrow
    slo = [{"metric": "itl", "stat": "p50", "limit_ms": 1e6}]
    run_slo, _ = _run(slo)
    assert ("itl50", "itl", "p50", "ITL\np50", True) in latency_columns(as_run(run_slo))
    heads = {w: [c.header for c in comparison_table(as_run(run_slo), w).columns] for w in range(60, 160, 2)}
    optional = ("req/s", "TPOT\np95", "ITL\np99")
    for w, h in heads.items():
        assert "ITL\np50" in h or not any(o in h for o in optional), f"width {w}: {h} dropped the SLO's column first"
    assert any("ITL\np50" in h and "req/s" not in h for h in heads.values())
    assert all(o in heads[158] for o in (*optional, "ITL\np50"))
    from compare.report import load_report_data, render_markdown

    d = tmp_path / "res"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(run_slo))
    (d / "requests.jsonl").write_text("".join(json.dumps(r.to_json()) + "\n" for r in recs))
    md = render_markdown(load_report_data(d))
    header = next(ln for ln in md.splitlines() if ln.startswith("| backend | load | ok | out tok/s"))
    for m in LATENCY:
        for st in m.table_stats:
            assert f"| {m.label} {st} |" in header
    assert "| ITL p50 |" in header


def test_plots_use_the_registry():
    assert plots.BAR_METRICS == tuple(m.stat_key(m.default_stats[0] if m.default_stats else None)
                                      for m in reg.REGISTRY if m.plotted)
    assert all(k in stats.METRICS for k in plots.BAR_METRICS)
