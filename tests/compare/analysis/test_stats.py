"""compare/analysis/stats.py on synthetic RequestRecords (integer ns times) summarised by the real metrics."""
from __future__ import annotations

import math

import numpy as np
import pytest

from compare.analysis.stats import MIN_REPEATS, collect, compare_levels, holm, single_ci
from tests.synth import make_run, records


def _pair(a_kw=None, b_kw=None, repeats=3, n=16):
    cells = {"a": [records("a", "c1", k, n=n, **(a_kw or {})) for k in range(repeats)],
             "b": [records("b", "c1", k, n=n, seed=7, **(b_kw or {})) for k in range(repeats)]}
    run, recs = make_run(cells)
    s = collect(run, recs)
    return s[("a", "c1")], s[("b", "c1")]


def _by(comps):
    return {c.metric: c for c in comps}


def test_holm_matches_hand_computation():
    # sorted p: 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone max -> 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_real_slowdown_is_significant_with_ci_around_true_ratio():
    a, b = _pair(b_kw={"ttft_ms": 30.0})  # TTFT 20 -> 30 ms: ratio 1.5
    c = _by(compare_levels(a, b))
    t = c["ttft_p50"]
    assert t.significant and t.winner == "a"
    assert t.ci[0] > 1.0 and t.ci[0] < 1.5 < t.ci[1]
    assert t.p_holm >= t.p_value
    # TPOT was not changed: the truth is "no significant difference"
    assert not c["tpot_p50"].significant and c["tpot_p50"].winner is None
    assert c["tpot_p50"].ci[0] < 1.0 < c["tpot_p50"].ci[1]


def test_seeded_results_are_reproducible():
    a, b = _pair(b_kw={"ttft_ms": 22.0})
    one = [c.as_dict() for c in compare_levels(a, b, seed=3)]
    two = [c.as_dict() for c in compare_levels(a, b, seed=3)]
    assert one == two


def test_too_few_repeats_gives_point_estimates_and_says_so():
    a, b = _pair(b_kw={"ttft_ms": 30.0}, repeats=1)
    for c in compare_levels(a, b):
        assert c.ci is None and c.p_value is None and not c.significant
        assert "repeats" in c.note and math.isfinite(c.ratio)
    assert _by(compare_levels(a, b))["ttft_p50"].ratio == pytest.approx(1.5, rel=0.15)
    assert single_ci(a, "ttft_p50") is None and MIN_REPEATS == 2


def test_level_metric_uses_paired_t_and_direction():
    a, b = _pair(b_kw={"tpot_ms": 10.0})  # twice the per-token time: throughput drops
    tp = _by(compare_levels(a, b))["output_tok_s"]
    assert "paired t" in tp.method
    assert tp.ratio < 0.75 and tp.significant and tp.winner == "a"


def test_equivalence_and_non_inferiority_against_margin():
    a, b = _pair(a_kw={"noise": 0.02}, b_kw={"noise": 0.02})
    same = _by(compare_levels(a, b, margin=0.10))["tpot_p50"]
    assert same.equivalent and same.noninferior
    a, b = _pair(b_kw={"tpot_ms": 7.0})
    worse = _by(compare_levels(a, b, margin=0.10))["tpot_p50"]
    assert worse.equivalent is False and worse.noninferior is False


def test_failed_requests_are_left_out_not_counted_as_zero():
    from dataclasses import replace

    cells = {n: [records(n, "c1", k) for k in range(2)] for n in ("a", "b")}
    cells["b"][0][3] = replace(cells["b"][0][3], error_kind="timeout", error="x", event_times_ns=())
    run, recs = make_run(cells)
    s = collect(run, recs)
    assert np.isnan(s[("b", "c1")].per_request["ttft"][0, 3])
    assert _by(compare_levels(s[("a", "c1")], s[("b", "c1")]))["ttft_p50"].ci is not None


def test_aa_false_positive_rate_is_controlled():
    """Same distribution on both sides, 30 simulated A/A comparisons x 5 metrics (Holm)."""
    hits = 0
    for sim in range(30):
        cells = {n: [records(n, "c1", k, seed=sim * 10 + i) for k in range(3)] for i, n in enumerate(("a", "b"))}
        run, recs = make_run(cells)
        s = collect(run, recs)
        hits += any(c.significant for c in compare_levels(s[("a", "c1")], s[("b", "c1")], n_boot=400))
    assert hits / 30 <= 0.15, hits
