"""The one SLO value: CLI form in, written form and JSON form out and back, level and per-request
evaluation, one-line errors naming the fix."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from core.errors import UserError
from core.slo import SLO, SLOTerm


@pytest.mark.parametrize("text, key, limit", [
    ("ttft_p95=2s", "ttft_p95", 2000.0), ("tpot_p50=100ms", "tpot_p50", 100.0),
    ("itl_p99=500us", "itl_p99", 0.5), ("e2e_mean=1.5s", "e2e_mean", 1500.0),
    ("ttft_max=250000ns", "ttft_max", 0.25), (" ttft_p90 = 3 s ", "ttft_p90", 3000.0),
])
def test_parse_one_term(text, key, limit):
    (t,) = SLO.parse(text)
    assert t.key == key and math.isclose(t.limit_ms, limit)


@pytest.mark.parametrize("bad", ["ttft=2s", "ttft_p95=2", "latency_p95=2s", "ttft_p95=fast", "ttft_p42=1s",
                                 "ttft_p95=2s,", "ttft_p95=2s,ttft_p95=3s"])
def test_bad_input_is_a_one_line_user_error_naming_the_form(bad):
    with pytest.raises(UserError) as e:
        SLO.parse(bad)
    msg = str(e.value)
    assert "\n" not in msg and "ttft_p95" in msg and "--slo ttft_p95=2s" in msg
    assert e.value.exit_code == 2


def test_no_slo_is_empty_and_falsy():
    assert SLO.parse(None) == SLO.parse("") == SLO() and not SLO() and SLO().describe() == "none"
    assert SLO.from_run({}) == SLO() and SLO().to_json() == []


@pytest.mark.parametrize("text", ["ttft_p95=2s,tpot_p95=50ms", "itl_p99=500us", "e2e_mean=1.5s",
                                  "ttft_max=1us,tpot_p50=250ns", "ttft_p95=1234.5ms"])
def test_written_form_and_json_form_read_back_to_the_same_value(text):
    slo = SLO.parse(text)
    assert SLO.parse(str(slo)) == slo
    # the JSON form is what run.json and tune.json hold (and the tune cache key hashes)
    stored = json.loads(json.dumps({"slo": slo.to_json()}))
    assert SLO.from_run(stored) == slo
    assert stored["slo"][0].keys() == {"metric", "stat", "limit_ms"}


def test_written_form_is_the_shortest_exact_unit():
    assert str(SLO.parse("ttft_p95=2000ms,tpot_p95=0.05s,itl_p99=0.5ms")) == "ttft_p95=2s,tpot_p95=50ms,itl_p99=500us"
    assert SLO.parse("ttft_p95=2s,tpot_p95=50ms").describe() == "ttft_p95 <= 2000 ms, tpot_p95 <= 50 ms"
    assert SLO.parse("ttft_p95=2s,tpot_p95=50ms").limits == {"ttft_p95": 2000.0, "tpot_p95": 50.0}


def test_a_stored_slo_that_is_not_ours_is_a_user_error():
    with pytest.raises(UserError, match="metric/stat/limit_ms"):
        SLO.from_json([{"metric": "ttft"}])
    with pytest.raises(UserError, match="METRIC_STAT"):
        SLO.from_json([{"metric": "ttft", "stat": "p42", "limit_ms": 1}])
    with pytest.raises(UserError, match="finite number"):
        SLOTerm("ttft", "p95", -1.0)


def test_the_value_is_frozen():
    slo = SLO.parse("ttft_p95=2s")
    with pytest.raises(AttributeError):
        slo.terms = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        slo.terms[0].limit_ms = 1.0  # type: ignore[misc]
    assert hash(slo) == hash(SLO.parse("ttft_p95=2000ms"))


def test_level_check_uses_each_terms_statistic_and_a_missing_metric_fails():
    slo = SLO.parse("ttft_p95=2s,tpot_mean=50ms,itl_p99=10ms")
    checks = slo.check_level({"ttft": {"p95": 1999.0}, "tpot": {"mean": 50.5}, "itl": None})
    assert checks["ttft_p95"] == {"value_ms": 1999.0, "limit_ms": 2000.0, "met": True}
    assert checks["tpot_mean"]["met"] is False and checks["tpot_mean"]["value_ms"] == 50.5
    assert checks["itl_p99"]["met"] is False and math.isnan(checks["itl_p99"]["value_ms"])


def test_per_request_values():
    slo = SLO.parse("ttft_p95=2s,itl_p50=10ms")
    assert slo.request_met({"ttft": 1500.0, "itl": [5.0, 5.0, 50.0]})  # the request's own ITL median is 5
    assert not slo.request_met({"ttft": 2000.1, "itl": [5.0]})
    assert not slo.request_met({"ttft": 1.0, "itl": [5.0, 50.0, 50.0]})
    # no value (a one-token answer has no ITL) does not count against the request
    assert slo.request_met({"ttft": 1.0, "itl": []}) and slo.request_met({})


@pytest.mark.parametrize("stat", ["p50", "p90", "p95", "p99", "mean", "max"])
def test_request_statistic_matches_numpy(stat):
    rng = np.random.default_rng(7)
    xs = [float(x) for x in rng.exponential(10.0, size=37)]
    expected = {"mean": np.mean(xs), "max": np.max(xs)}.get(stat)
    if expected is None:
        expected = np.percentile(xs, int(stat[1:]))
    assert SLOTerm("itl", stat, 1.0).request_value(xs) == pytest.approx(expected, rel=1e-12)
