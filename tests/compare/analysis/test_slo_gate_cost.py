"""--require-slo's misses (compare/analysis/slo_gate.py) and cost per device (compare/analysis/cost.py),
on synthetic records."""
from __future__ import annotations

from dataclasses import replace

import pytest

from adapters.spec import ServingSpec
from compare.analysis.cost import devices
from compare.analysis.slo_gate import slo_misses
from compare.analysis.verdict import build_verdict, summary_lines
from core.results import as_run
from core.slo import SLO
from tests.synth import make_run, records


def _run(names=("vllm[max_num_seqs=1]", "vllm[max_num_seqs=4]"), **kw):
    run, recs = make_run({n: [records(n, "c1", 0, ttft_ms=20.0 * (i + 1), tpot_ms=5.0)] for i, n in enumerate(names)},
                         **kw)
    return as_run(run), recs


def test_every_miss_is_one_line_backend_level_term_measured_vs_limit():
    run, recs = _run()
    misses = slo_misses(run, recs, SLO.parse("ttft_p95=30ms,tpot_p95=1s"))
    assert [(m.backend, m.level, m.term) for m in misses] == [("vllm[max_num_seqs=4]", "c1", "ttft_p95")]
    line = misses[0].line()
    assert line.startswith("vllm[max_num_seqs=4] c1: ttft_p95 ") and line.endswith("%)") and "> 30 ms (+" in line
    assert slo_misses(run, recs, SLO.parse("ttft_p95=10s")) == []


def test_failed_requests_and_unreached_levels_are_misses():
    run, recs = _run()
    recs = [r for r in recs if r.backend != "vllm[max_num_seqs=1]"]  # never reached its level
    bad = replace(recs[0], error_kind="timeout", error="t")
    misses = slo_misses(run, [bad] + recs[1:], SLO.parse("ttft_p95=10s"))
    lines = [m.line() for m in misses]
    assert lines == ["vllm[max_num_seqs=1] c1: not measured (the backend did not reach this level)",
                     "vllm[max_num_seqs=4] c1: 1 of 16 requests failed (a failed request misses every limit)"]


@pytest.mark.parametrize("name, tp, n", [
    ("vllm", 1, 1), ("vllm", 2, 2), ("tp@2*vllm", 1, 2), ("replicas@2*vllm:lb=lor", 1, 2),
    ("replicas@3*vllm", 2, 6), ("tp@4*vllm[block_size=32,max_num_seqs=8]", 1, 4), ("hf[seed=1]", 1, 1),
])
def test_devices_a_backend_occupies(name, tp, n):
    assert devices(name, ServingSpec(model="m", tensor_parallel=tp)) == n


def test_cost_counts_every_device_of_a_topology_and_says_how_many():
    run, recs = _run(("vllm", "tp@2*vllm", "replicas@2*vllm:lb=lor"))
    v = build_verdict(run, recs, gpu_hour_price=3.6)
    for n in ("vllm", "tp@2*vllm", "replicas@2*vllm:lb=lor"):
        tps = run.backends[n].levels["c1"].output_tok_s
        assert v.costs[n]["c1"] == pytest.approx(3.6 * v.devices[n] / (tps * 3600) * 1e6)
    assert v.devices == {"vllm": 1, "tp@2*vllm": 2, "replicas@2*vllm:lb=lor": 2}
    lines = [s for s in summary_lines(v) if s.startswith("cost per million")]
    assert any("tp@2*vllm (2 devices): c1 $" in s for s in lines) and any("vllm (1 device): c1 $" in s for s in lines)
